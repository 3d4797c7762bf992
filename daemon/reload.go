package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tokenmesh/tokenmesh/config"
)

// reloadDebounce is how long the watcher waits after the last change in
// the config file's directory before it reads the file (an editor or a
// Kubernetes ConfigMap update writes in several steps).
const reloadDebounce = 300 * time.Millisecond

// reloadTimeout bounds one reload (the node's loop applies it between two
// decisions; this only guards against a stuck node).
const reloadTimeout = 10 * time.Second

// Reload reads Config.ConfigPath again and applies its rules (the package
// documentation says how each rule fares); trigger says why, for the log
// ("SIGHUP"). A file that does not load, or whose rules the node refuses
// (or that names a rule the Envoy config has), is refused as a whole: the
// error is logged ("reload refused: the old rules stay") and returned,
// and the old rules keep answering. Then the services are told
// (Service.Reloaded); the first of their errors is returned, the rules
// being applied. Errors: ErrNoConfigFile without a ConfigPath (nothing
// logged), those above, ctx.Err().
func (d *Daemon) Reload(ctx context.Context, trigger string) error {
	if d.cfg.ConfigPath == "" {
		return ErrNoConfigFile
	}
	return d.reload(ctx, trigger, false)
}

// fileSum is the sha256 of the file at path (zero when it does not read).
func fileSum(path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

// reload is Reload; with onlyIfChanged, a file whose bytes are those last
// seen is left alone.
func (d *Daemon) reload(ctx context.Context, trigger string, onlyIfChanged bool) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	path := d.cfg.ConfigPath
	b, err := os.ReadFile(path)
	if err != nil {
		d.log.Error("reload refused: the old rules stay", "trigger", trigger, "config", path, "error", err.Error())
		return err
	}
	sum := sha256.Sum256(b)
	if onlyIfChanged && sum == d.sum {
		return nil
	}
	d.sum = sum
	rs, err := d.apply(ctx, trigger)
	if err != nil {
		d.log.Error("reload refused: the old rules stay", "trigger", trigger, "config", path, "error", err.Error())
		return err
	}
	var first error
	for _, s := range d.cfg.Services {
		if err := s.Reloaded(ctx, rs); err != nil {
			d.log.Error("reload: a service did not take the new rules (the node has them)", "service", s.Name(), "trigger", trigger, "error", err.Error())
			if first == nil {
				first = fmt.Errorf("service %s: %w", s.Name(), err)
			}
		}
	}
	return first
}

// apply loads the config file and applies its rules to the node, the API
// and the HTTP mode; it returns what is now in force.
func (d *Daemon) apply(ctx context.Context, trigger string) (RuleSet, error) {
	path := d.cfg.ConfigPath
	f, err := config.Load(path)
	if err != nil {
		return RuleSet{}, err
	}
	rules, err := f.ClusterRules()
	if err != nil {
		return RuleSet{}, fmt.Errorf("rules: %w", err)
	}
	rules, dup := appendEnvoyRules(rules, d.envoyRules)
	if dup != "" {
		return RuleSet{}, fmt.Errorf("rule %q is also a rule of the envoy config; rename that rule", dup)
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	ch, err := d.node.SetRules(ctx, rules)
	if err != nil {
		return RuleSet{}, err
	}
	d.api.SetRules(rules)
	d.http.set(f, rules)
	d.rulesMu.Lock()
	d.rules.File, d.rules.Rules = f, rules
	rs := d.rules
	d.rulesMu.Unlock()
	if ch.Empty() {
		d.log.Info("rules reloaded: no change", "trigger", trigger, "config", path, "rules", len(rules))
	} else {
		d.log.Info("rules reloaded", "trigger", trigger, "config", path, "added", ch.Added, "changed", ch.Changed,
			"removed", ch.Removed, "kept", len(ch.Kept))
	}
	if fmt.Sprint(f.Node) != fmt.Sprint(d.nodeConf) {
		d.log.Warn("node settings in the file changed: they are not reloaded; restart the node to apply them (rules were)",
			"config", path)
		d.nodeConf = f.Node
	}
	return rs, nil
}

// watch reloads (onlyIfChanged) whenever something changes in the config
// file's directory, reloadDebounce after the last change, until ctx ends.
// Watching the directory, not the file, follows editors that write a new
// file and rename it over the old one, and Kubernetes ConfigMap volumes
// (a symlink swapped to a new directory). It returns once the watch is set
// up, or the error setting it up; the watching goroutine counts in d.bg.
func (d *Daemon) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dir := filepath.Dir(d.cfg.ConfigPath)
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer w.Close()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
					timer.Reset(reloadDebounce)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				d.log.Warn("config watcher", "dir", dir, "error", err.Error())
			case <-timer.C:
				_ = d.reload(ctx, "file changed", true)
			}
		}
	}()
	return nil
}
