package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/server"
)

// reloadDebounce is how long the watcher waits after the last change in
// the config file's directory before it reads the file (an editor or a
// Kubernetes ConfigMap update writes in several steps).
const reloadDebounce = 300 * time.Millisecond

// reloadTimeout bounds one reload (the node's loop applies it between two
// decisions; this only guards against a stuck node).
const reloadTimeout = 10 * time.Second

// swapHandler serves the handler last stored (serve's HTTP API with its
// HTTP-mode rules, rebuilt by a reload).
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// reloader re-reads serve's config file and applies its rules to the
// running node: on SIGHUP and, with the watcher, when the file changes.
// Only the rules are reloaded; node settings need a restart (a change of
// them is logged as not applied).
type reloader struct {
	path       string
	envoyRules []cluster.Rule // rules from --envoy-config: kept as they are
	node       *limiter.Node
	api        *server.Server
	edge       *swapHandler
	build      func(f *config.File, rules []cluster.Rule) http.Handler // the HTTP API for these rules
	log        *slog.Logger

	mu       sync.Mutex // one reload at a time
	nodeConf config.Node
	sum      [32]byte // sha256 of the file as last loaded (or refused)
}

func newReloader(path string, f *config.File, envoyRules []cluster.Rule, node *limiter.Node, api *server.Server,
	edge *swapHandler, build func(*config.File, []cluster.Rule) http.Handler, log *slog.Logger) *reloader {
	r := &reloader{path: path, envoyRules: envoyRules, node: node, api: api, edge: edge, build: build, log: log, nodeConf: f.Node}
	if b, err := os.ReadFile(path); err == nil {
		r.sum = sha256.Sum256(b)
	}
	return r
}

// reload loads the file and applies its rules; a file that does not load
// or whose rules the node refuses is refused as a whole: the error is
// logged and the old rules keep answering. trigger says why ("SIGHUP",
// "file changed"); with onlyIfChanged, a file whose bytes are those last
// seen is left alone.
func (r *reloader) reload(ctx context.Context, trigger string, onlyIfChanged bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := os.ReadFile(r.path)
	if err != nil {
		r.log.Error("reload refused: the old rules stay", "trigger", trigger, "config", r.path, "error", err.Error())
		return err
	}
	sum := sha256.Sum256(b)
	if onlyIfChanged && sum == r.sum {
		return nil
	}
	r.sum = sum
	err = r.apply(ctx, trigger)
	if err != nil {
		r.log.Error("reload refused: the old rules stay", "trigger", trigger, "config", r.path, "error", err.Error())
	}
	return err
}

// appendEnvoyRules appends the rules derived from the envoy config to the
// config file's rules; dup is the first name both have ("" when none:
// only then is all of envoy appended).
func appendEnvoyRules(rules, envoy []cluster.Rule) (all []cluster.Rule, dup string) {
	have := make(map[string]bool, len(rules))
	for _, x := range rules {
		have[x.Name] = true
	}
	for _, x := range envoy {
		if have[x.Name] {
			return rules, x.Name
		}
		rules = append(rules, x)
	}
	return rules, ""
}

func (r *reloader) apply(ctx context.Context, trigger string) error {
	f, err := config.Load(r.path)
	if err != nil {
		return err
	}
	rules, err := f.ClusterRules()
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	rules, dup := appendEnvoyRules(rules, r.envoyRules)
	if dup != "" {
		return fmt.Errorf("rule %q is also a rule of the envoy config; rename that rule", dup)
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	ch, err := r.node.SetRules(ctx, rules)
	if err != nil {
		return err
	}
	r.api.SetRules(rules)
	r.edge.set(r.build(f, rules))
	if ch.Empty() {
		r.log.Info("rules reloaded: no change", "trigger", trigger, "config", r.path, "rules", len(rules))
	} else {
		r.log.Info("rules reloaded", "trigger", trigger, "config", r.path, "added", ch.Added, "changed", ch.Changed,
			"removed", ch.Removed, "kept", len(ch.Kept))
	}
	if fmt.Sprint(f.Node) != fmt.Sprint(r.nodeConf) {
		r.log.Warn("node settings in the file changed: they are not reloaded; restart the node to apply them (rules were)",
			"config", r.path)
		r.nodeConf = f.Node
	}
	return nil
}

// watch reloads (onlyIfChanged) whenever something changes in the config
// file's directory, reloadDebounce after the last change, until ctx ends.
// Watching the directory, not the file, follows editors that write a new
// file and rename it over the old one, and Kubernetes ConfigMap volumes
// (a symlink swapped to a new directory). It returns once the watch is set
// up; errors setting it up are returned (serve logs them and runs on).
func (r *reloader) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	dir := filepath.Dir(r.path)
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	go func() {
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
				r.log.Warn("config watcher", "dir", dir, "error", err.Error())
			case <-timer.C:
				_ = r.reload(ctx, "file changed", true)
			}
		}
	}()
	return nil
}
