package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/srtm"
)

func newPlanCmd() *cobra.Command {
	var brokersPath, topicPath, policy string
	var simulate bool
	var stopWithin float64
	var duration time.Duration
	var seed uint64
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Assign a topic's publishers to brokers and split its token bucket among them (SRTM's Load Distributor)",
		Long: `plan is SRTM's Load Distributor (seed 000 §4.2-4.3): it reads brokers (message
processing capacity mcap and current load) and a topic (publishers with rates,
batch sizes and correlation group keys; the topic's token bucket r, b; its SLO)
and prints which broker takes which publishers and the sub-token bucket
(r_l, b_l) each one enforces, with sum r_l = r and sum b_l = b exactly.

By default it runs the paper's pipeline: Step (1) concentration (the fewest
brokers, by decreasing residual capacity rcap, whose rcaps cover the topic's
rate), Step (2) max-min quotas min(rcap, rate/k) with publishers taken from
every correlation group in proportion (§4.3), and, with --simulate, Step (3)
online fitting.

Policies (--policy):
  maxmin         the paper's Steps (1)-(2): quotas min(rcap, rate/k),
                 water-filled so all of r is placed (the default)
  concentration  ours: the same brokers, each filled up to its rcap in turn;
                 the last one takes the remainder, which can leave it a small
                 sub-bucket with a large DRL penalty (the weakness §6.3 says
                 max-min avoids). The default before SRTM's pipeline was.
  conc-equal     the paper's Conc baseline (§6.3): the same brokers, loaded to
                 equal total load
  lb             the paper's LB baseline: spread over every broker with spare
                 capacity

--simulate runs SRTM's online fitting (Step (3)) in the broker model (ours: a
single-server FIFO queue per broker with service time 1/mcap, background load
at each broker's current load, Poisson publishers; latency = the exact token
wait at the broker's sub-bucket + queueing + processing): a broker whose p99
misses the topic's SLO binary-searches how many of its new publishers it keeps
(every correlation group in the same proportion), stopping once the p99 is
within --stop-within below the SLO (footnote 11: 20%; 0 searches to the exact
boundary), sheds the rest to the next iteration and is marked full. It prints
the iterations, the measurement rounds of each (§6.5, Table 1), the fitted
plan and p50/p95/p99 per broker.`,
		Example: "  tokenmesh plan --brokers examples/srtm/brokers.yaml --topic examples/srtm/topic.yaml\n" +
			"  tokenmesh plan --brokers examples/srtm/brokers.yaml --topic examples/srtm/topic.yaml --simulate\n" +
			"  tokenmesh plan --brokers examples/srtm/brokers.yaml --topic examples/srtm/topic.yaml --policy concentration",
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
			case srtm.Concentration, srtm.ConcentrationEqual, srtm.MaxMin, srtm.LoadBalance:
			default:
				return usageErr("--policy %q: want maxmin (the paper's, the default), concentration, conc-equal or lb", policy)
			}
			if !(stopWithin >= 0 && stopWithin < 1) {
				return usageErr("--stop-within %v: want a fraction of the SLO in [0, 1) (footnote 11: 0.2; 0 = the exact boundary)", stopWithin)
			}
			if !simulate {
				if cmd.Flags().Changed("stop-within") {
					return usageErr("--stop-within tunes online fitting: give --simulate too")
				}
				res, err := srtm.Plan(brokers, topic, srtm.Policy(policy))
				if err != nil {
					return err
				}
				return writePlan(cmd.OutOrStdout(), res)
			}
			if duration <= 0 {
				return usageErr("--duration %v: must be positive", duration)
			}
			opts := srtm.SimOptions{Duration: duration, Seed: seed}
			if topic.SLO <= 0 {
				return usageErr("--simulate fits against the topic's SLO: %s has no slo (e.g. slo: 5ms)", topicPath)
			}
			fit, err := srtm.FitWith(brokers, topic, srtm.Policy(policy), srtm.ModelP99(topic, opts), srtm.FitOptions{StopWithin: stopWithin})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "online fitting: %d iterations, measurement rounds per iteration %v, brokers marked full: %v\n", fit.Iterations, fit.Rounds(), fit.Full)
			if err := writePlan(out, fit.Plan); err != nil {
				return err
			}
			sim, err := srtm.Simulate(fit.Plan, brokers, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "\nbroker model, %v simulated, seed %d (SLO p99 %v):\n", duration, seed, topic.SLO)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "broker\tmessages\tutil\tp50\tp95\tp99\ttoken p99\t")
			for _, l := range sim.PerBroker {
				fmt.Fprintf(tw, "%s\t%d\t%.2f\t%v\t%v\t%v\t%v\t\n", l.Broker, l.Messages, l.Util, l.P50, l.P95, l.P99, l.TokenP99)
			}
			o := sim.Overall
			fmt.Fprintf(tw, "all\t%d\t\t%v\t%v\t%v\t%v\t\n", o.Messages, o.P50, o.P95, o.P99, o.TokenP99)
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&brokersPath, "brokers", "", "YAML file of brokers (name, mcap, load in messages/s)")
	fl.StringVar(&topicPath, "topic", "", "YAML file of the topic (name, rate, burst, slo, publishers)")
	fl.StringVar(&policy, "policy", string(srtm.MaxMin), "maxmin (the paper's Step (2)), concentration (ours: greedy fill), conc-equal or lb (the paper's baselines)")
	fl.BoolVar(&simulate, "simulate", false, "run online fitting in the broker model and report p50/p95/p99 per broker")
	fl.Float64Var(&stopWithin, "stop-within", srtm.DefaultStopWithin, "with --simulate: stop the shed search once p99 is within this fraction below the SLO (footnote 11: 0.2; 0 = exact boundary)")
	fl.DurationVar(&duration, "duration", 10*time.Second, "simulated time for --simulate")
	fl.Uint64Var(&seed, "seed", 1, "random seed for --simulate")
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
