package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/envoyrls"
)

// reloadDebounce is how long the watcher waits after the last change in
// the config file's directory before it reads the file (an editor or a
// Kubernetes ConfigMap update writes in several steps).
const reloadDebounce = 300 * time.Millisecond

// reloadTimeout bounds one reload (the node's loop applies it between two
// decisions; this only guards against a stuck node).
const reloadTimeout = 10 * time.Second

// Reload reads Config.ConfigPath and the Envoy config directory again
// and applies their rules together (the package documentation says how
// each rule fares), then swaps the Envoy RLS limits; trigger says why,
// for the log ("SIGHUP"). A config file or an Envoy file that does not
// load, rules the node refuses, or a rule name both configs have, are
// refused as a whole: the error (naming the file, line and field where
// known) is logged ("reload refused: the old rules stay") and returned,
// and the old rules and limits keep answering. Then the services are told
// (Service.Reloaded, with the new Envoy config in RuleSet.Envoy); the
// first of their errors is returned, the rules being applied. Errors:
// ErrNoConfigFile without a ConfigPath and without an Envoy config
// (nothing logged), those above, ctx.Err().
func (d *Daemon) Reload(ctx context.Context, trigger string) error {
	if d.cfg.ConfigPath == "" && d.envoyDir == "" {
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

// sources are the log attributes naming what a reload reads: config (the
// config file) and envoy_config (the Envoy directory), those set.
func (d *Daemon) sources() []any {
	var attrs []any
	if d.cfg.ConfigPath != "" {
		attrs = append(attrs, "config", d.cfg.ConfigPath)
	}
	if d.envoyDir != "" {
		attrs = append(attrs, "envoy_config", d.envoyDir)
	}
	return attrs
}

// reload is Reload; with onlyIfChanged, a config file and an Envoy
// directory whose bytes are those last seen are left alone.
func (d *Daemon) reload(ctx context.Context, trigger string, onlyIfChanged bool) error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	refused := func(err error) error {
		d.log.Error("reload refused: the old rules stay", append([]any{"trigger", trigger}, append(d.sources(), "error", err.Error())...)...)
		return err
	}
	var sum, envoySum [32]byte
	if path := d.cfg.ConfigPath; path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return refused(err)
		}
		sum = sha256.Sum256(b)
	}
	if d.envoyDir != "" {
		envoySum = envoyrls.Digest(d.envoyDir)
	}
	if onlyIfChanged && sum == d.sum && envoySum == d.envoySum {
		return nil
	}
	d.sum, d.envoySum = sum, envoySum
	rs, err := d.apply(ctx, trigger)
	if err != nil {
		return refused(err)
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

// apply loads the config file (the one in force without a ConfigPath) and
// the Envoy config, and applies their rules to the node, the API, the
// HTTP mode and Envoy's RLS, in that order (the node has a rule before
// anything checks it); it returns what is now in force.
func (d *Daemon) apply(ctx context.Context, trigger string) (RuleSet, error) {
	path := d.cfg.ConfigPath
	f := d.Rules().File
	if path != "" {
		var err error
		if f, err = config.Load(path); err != nil {
			return RuleSet{}, err
		}
	}
	envoy, err := loadEnvoy(d.envoyDir, d.envoyStr)
	if err != nil {
		return RuleSet{}, err
	}
	rs, err := ruleSet(f, envoy, d.envoyDir, d.epoch)
	if err != nil {
		return RuleSet{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	// The limit overrides' rules are derived again from the new files
	// (SetRules keeps those whose descriptor is still there).
	if envoy != nil {
		d.node.Cluster().SetDeriver(envoy.Deriver(d.epoch))
	}
	ch, err := d.node.SetRules(ctx, rs.Rules)
	if err != nil {
		if old := d.Rules().Envoy; old != nil {
			d.node.Cluster().SetDeriver(old.Deriver(d.epoch))
		}
		return RuleSet{}, err
	}
	d.api.SetRules(rs.Rules)
	d.http.set(f, rs.Rules)
	if d.rls != nil {
		d.rls.SetConfig(envoy)
	}
	d.rulesMu.Lock()
	d.rules = rs
	d.rulesMu.Unlock()
	attrs := append([]any{"trigger", trigger}, d.sources()...)
	if envoy != nil {
		attrs = append(attrs, "envoy_domains", len(envoy.Domains), "envoy_limits", len(envoy.Limits))
	}
	if ch.Empty() {
		d.log.Info("rules reloaded: no change", append(attrs, "rules", len(rs.Rules))...)
	} else {
		d.log.Info("rules reloaded", append(attrs, "added", ch.Added, "changed", ch.Changed, "removed", ch.Removed, "kept", len(ch.Kept))...)
	}
	if path != "" && fmt.Sprint(f.Node) != fmt.Sprint(d.nodeConf) {
		d.log.Warn("node settings in the file changed: they are not reloaded; restart the node to apply them (rules were)",
			"config", path)
		d.nodeConf = f.Node
	}
	return rs, nil
}

// watch reloads (onlyIfChanged) whenever something changes in the config
// file's directory or in the Envoy config directory, reloadDebounce after
// the last change, until ctx ends. Watching the directory, not the file,
// follows editors that write a new file and rename it over the old one,
// and Kubernetes ConfigMap volumes (a symlink swapped to a new directory
// inside the watched one); a symlink swapped above the Envoy directory
// (envoyproxy/ratelimit's RUNTIME_ROOT) is not seen: SIGHUP reloads it.
// It returns once the watch is set up, or the error setting it up; the
// watching goroutine counts in d.bg.
func (d *Daemon) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	var dirs []string
	if d.cfg.ConfigPath != "" {
		dirs = append(dirs, filepath.Dir(d.cfg.ConfigPath))
	}
	if d.envoyDir != "" {
		dirs = append(dirs, d.envoyDir)
	}
	for _, dir := range dirs {
		if err := w.Add(dir); err != nil {
			_ = w.Close()
			return fmt.Errorf("watching %s: %w", dir, err)
		}
	}
	dir := strings.Join(dirs, " ")
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
