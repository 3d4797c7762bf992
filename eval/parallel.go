package eval

import (
	"sync"

	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// RunParallel is Run(opts) with up to workers strategies simulated at once
// (tokenmesh sim --parallel; ours). Each strategy is an independent run (its
// own nodes, network and random sources, all seeded from opts.Seed), so its
// row does not depend on what runs beside it: the report is the one Run
// builds, byte for byte, in the order of opts.Strategies. Central
// (opts.Strategies[0], the reference) is cheap and is simulated again with
// every strategy, since Run compares each with its own central run; the
// central row and the series come from the first run. Errors are Run's; of
// several, the one of the first strategy in order.
func RunParallel(opts Options, workers int) (*Report, error) {
	if workers <= 1 || len(opts.Strategies) <= 2 {
		return Run(opts)
	}
	if opts.Strategies[0].Name != "central" {
		return Run(opts) // Run names the error
	}
	central, rest := opts.Strategies[0], opts.Strategies[1:]
	reps := make([]*Report, len(rest))
	errs := make([]error, len(rest))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, s := range rest {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			o := opts
			o.Strategies = []registry.Info{central, s}
			if opts.Progress != nil && i > 0 {
				// central's own progress is reported by the first run only.
				o.Progress = func(name string, done, total int) {
					if name != central.Name {
						opts.Progress(name, done, total)
					}
				}
			}
			reps[i], errs[i] = Run(o)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	rep := reps[0]
	for _, r := range reps[1:] {
		row := r.Results[1]
		rep.Results = append(rep.Results, row)
		rep.Series.Admitted[row.Strategy] = r.Series.Admitted[row.Strategy]
		rep.Series.Rejected[row.Strategy] = r.Series.Rejected[row.Strategy]
		rep.Series.AdmittedTokens[row.Strategy] = r.Series.AdmittedTokens[row.Strategy]
		if sf, ok := r.Series.Shortfall[row.Strategy]; ok {
			rep.Series.addShortfall(row.Strategy, sf, r.Series.ShortfallWindow)
		}
	}
	return rep, nil
}
