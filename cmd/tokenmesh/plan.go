package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/srtm"
)

func newPlanCmd() *cobra.Command {
	var brokersPath, topicPath, policy string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Assign a topic's publishers to brokers and split its token bucket among them (SRTM)",
		Long: `plan is SRTM's Load Distributor (seed 000 §4.2-4.3): it reads brokers (message
processing capacity mcap and current load) and a topic (publishers with rates,
batch sizes and correlation group keys; the topic's token bucket r, b; its SLO)
and prints which broker takes which publishers and the sub-token bucket
(r_l, b_l) each one enforces, with sum r_l = r and sum b_l = b exactly.

Policies:
  concentration  the fewest brokers, by decreasing residual capacity, whose
                 residual capacity covers the topic's rate (the default: every
                 extra sub-bucket adds DRL penalty, Proposition 1)
  maxmin         the same brokers, maximising the smallest share
  lb             spread over every broker with spare capacity (the baseline)

Publishers of each correlation group are spread over the chosen brokers in
proportion to their share, so no broker takes a whole synchronised burst.`,
		Example: "  tokenmesh plan --brokers examples/srtm/brokers.yaml --topic examples/srtm/topic.yaml\n" +
			"  tokenmesh plan --brokers examples/srtm/brokers.yaml --topic examples/srtm/topic.yaml --policy maxmin",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if brokersPath == "" || topicPath == "" {
				return usageErr("plan needs --brokers FILE and --topic FILE")
			}
			brokers, err := srtm.LoadBrokers(brokersPath)
			if err != nil {
				return err
			}
			topic, err := srtm.LoadTopic(topicPath)
			if err != nil {
				return err
			}
			switch srtm.Policy(policy) {
			case srtm.Concentration, srtm.MaxMin, srtm.LoadBalance:
			default:
				return usageErr("--policy %q: want concentration, maxmin or lb", policy)
			}
			res, err := srtm.Plan(brokers, topic, srtm.Policy(policy))
			if err != nil {
				return err
			}
			return writePlan(cmd.OutOrStdout(), res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&brokersPath, "brokers", "", "YAML file of brokers (name, mcap, load in messages/s)")
	fl.StringVar(&topicPath, "topic", "", "YAML file of the topic (name, rate, burst, slo, publishers)")
	fl.StringVar(&policy, "policy", string(srtm.Concentration), "concentration, maxmin or lb")
	return cmd
}

func writePlan(w io.Writer, res srtm.PlanResult) error {
	fmt.Fprintf(w, "topic %s: rate %v, burst %d, policy %s, %d brokers\n\n", res.Topic, res.Rate, res.Burst, res.Policy, len(res.Shares))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "broker\trcap msg/s\tr_l msg/s\tb_l\tpublishers msg/s\tpublishers\t")
	for _, s := range res.Shares {
		names := make([]string, len(s.Publishers))
		for i, p := range s.Publishers {
			names[i] = p.Name
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%d\t%.0f\t%s\t\n", s.Broker, s.RCap, s.Rate.PerSec(), s.Burst, s.PublisherRate, strings.Join(names, ","))
	}
	return tw.Flush()
}
