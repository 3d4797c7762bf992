package grpcpeer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/internal/pki"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// inbox collects the frames a transport delivers.
type inbox struct {
	mu     sync.Mutex
	frames []cluster.Frame
}

func (b *inbox) recv(f cluster.Frame) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames = append(b.frames, f)
}

func (b *inbox) snapshot() []cluster.Frame {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]cluster.Frame(nil), b.frames...)
}

// has reports whether a frame with this rule and payload from from arrived.
func (b *inbox) has(from strategy.NodeID, rule, payload string) bool {
	for _, f := range b.snapshot() {
		if f.From == from && f.Rule == rule && string(f.Payload) == payload {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newTransport(t *testing.T, cfg Config) *Transport {
	t.Helper()
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// mesh starts n transports "n0".. that know each other.
func mesh(t *testing.T, n int, tlsFor func(id strategy.NodeID) *tls.Config) ([]strategy.NodeID, map[strategy.NodeID]*Transport, map[strategy.NodeID]*inbox) {
	t.Helper()
	return meshOf(t, n, func(id strategy.NodeID) Config {
		cfg := Config{Self: id}
		if tlsFor != nil {
			cfg.TLS = tlsFor(id)
		}
		return cfg
	})
}

// meshOf starts n transports "n0".., transport id made with cfgFor(id),
// that know each other.
func meshOf(t *testing.T, n int, cfgFor func(id strategy.NodeID) Config) ([]strategy.NodeID, map[strategy.NodeID]*Transport, map[strategy.NodeID]*inbox) {
	t.Helper()
	var ids []strategy.NodeID
	trs := map[strategy.NodeID]*Transport{}
	boxes := map[strategy.NodeID]*inbox{}
	for i := range n {
		id := strategy.NodeID(fmt.Sprintf("n%d", i))
		ids = append(ids, id)
		trs[id] = newTransport(t, cfgFor(id))
		boxes[id] = &inbox{}
		trs[id].Listen(boxes[id].recv)
	}
	book := map[strategy.NodeID]string{}
	for id, tr := range trs {
		book[id] = tr.Addr()
	}
	for _, tr := range trs {
		tr.SetPeers(book)
	}
	return ids, trs, boxes
}

func TestExchangeBothWays(t *testing.T) {
	ids, trs, boxes := mesh(t, 3, nil)
	for _, from := range ids {
		for _, to := range ids {
			if from == to {
				continue
			}
			for i := range 3 {
				p := fmt.Sprintf("%s->%s #%d", from, to, i)
				if err := trs[from].Send(to, cluster.Frame{Rule: "r", From: "forged", Payload: []byte(p)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, from := range ids {
		for _, to := range ids {
			if from == to {
				continue
			}
			eventually(t, fmt.Sprintf("%s->%s", from, to), func() bool {
				return boxes[to].has(from, "r", fmt.Sprintf("%s->%s #2", from, to))
			})
		}
	}
	// Frames on one stream arrive in order, From set by the transport.
	var got []string
	for _, f := range boxes["n1"].snapshot() {
		if f.From == "forged" {
			t.Fatalf("frame kept the sender's From: %+v", f)
		}
		if f.From == "n0" {
			got = append(got, string(f.Payload))
		}
	}
	if len(got) != 3 || got[0] != "n0->n1 #0" || got[2] != "n0->n1 #2" {
		t.Fatalf("n0->n1 frames %q, want 3 in order", got)
	}
	if err := trs["n0"].Send("stranger", cluster.Frame{Rule: "r"}); err == nil {
		t.Fatal("Send to a peer not in the book succeeded")
	}
	if st := trs["n0"].Stats(); st.Sent != 6 || st.Dials != 2 {
		t.Fatalf("n0 stats %+v, want 6 sent on 2 streams", st)
	}
}

func TestUnknownSenderRefused(t *testing.T) {
	recvBox := &inbox{}
	a := newTransport(t, Config{Self: "a", Peers: map[strategy.NodeID]string{"b": "127.0.0.1:1"}})
	a.Listen(recvBox.recv)
	// x is not in a's book but knows a's address. (Without TLS a name is
	// taken on its word; TestMTLS covers a sender claiming a member's name.)
	x := newTransport(t, Config{Self: "x", Peers: map[strategy.NodeID]string{"a": a.Addr()}})
	for range 20 {
		_ = x.Send("a", cluster.Frame{Rule: "r", Payload: []byte("intruder")})
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "the refusal", func() bool { return a.Stats().Refused > 0 })
	// b is a member: its frames pass, and the refused ones never did.
	b := newTransport(t, Config{Self: "b", Peers: map[strategy.NodeID]string{"a": a.Addr()}})
	_ = b.Send("a", cluster.Frame{Rule: "r", Payload: []byte("member")})
	eventually(t, "b's frame", func() bool { return recvBox.has("b", "r", "member") })
	for _, f := range recvBox.snapshot() {
		if f.From != "b" {
			t.Fatalf("a frame from a non-member was delivered: %+v", f)
		}
	}
	// Removing b from the book refuses it from then on.
	a.SetPeers(map[strategy.NodeID]string{})
	n := len(recvBox.snapshot())
	for range 20 {
		_ = b.Send("a", cluster.Frame{Rule: "r", Payload: []byte("late")})
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := len(recvBox.snapshot()); got != n {
		t.Fatalf("%d frames from a removed peer were delivered", got-n)
	}
}

func TestRedialAfterRestart(t *testing.T) {
	bBox := &inbox{}
	b := newTransport(t, Config{Self: "b", Peers: map[strategy.NodeID]string{"a": "127.0.0.1:1"}})
	b.Listen(bBox.recv)
	addr := b.Addr()
	a := newTransport(t, Config{Self: "a", Peers: map[strategy.NodeID]string{"b": addr}})
	_ = a.Send("b", cluster.Frame{Rule: "r", Payload: []byte("before")})
	eventually(t, "the first frame", func() bool { return bBox.has("a", "r", "before") })

	b.Close()
	// Sends while b is gone are lost; they do not block.
	for range 10 {
		start := time.Now()
		_ = a.Send("b", cluster.Frame{Rule: "r", Payload: []byte("lost")})
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("Send blocked %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// b comes back on the same address.
	b2Box := &inbox{}
	b2 := newTransport(t, Config{Self: "b", ListenAddr: addr, Peers: map[strategy.NodeID]string{"a": a.Addr()}})
	b2.Listen(b2Box.recv)
	eventually(t, "a frame after the restart", func() bool {
		_ = a.Send("b", cluster.Frame{Rule: "r", Payload: []byte("after")})
		time.Sleep(10 * time.Millisecond)
		return b2Box.has("a", "r", "after")
	})
	if st := a.Stats(); st.Dials < 2 {
		t.Fatalf("a stats %+v, want a redial", st)
	}

	// b moves to another address: SetPeers redials it there.
	b2.Close()
	b3Box := &inbox{}
	b3 := newTransport(t, Config{Self: "b", Peers: map[strategy.NodeID]string{"a": a.Addr()}})
	b3.Listen(b3Box.recv)
	a.SetPeers(map[strategy.NodeID]string{"b": b3.Addr()})
	eventually(t, "a frame at the new address", func() bool {
		_ = a.Send("b", cluster.Frame{Rule: "r", Payload: []byte("moved")})
		time.Sleep(10 * time.Millisecond)
		return b3Box.has("a", "r", "moved")
	})
}

func TestQueueFullDrops(t *testing.T) {
	// The peer's address refuses connections: frames pile up behind the
	// backoff, and Send drops what the queue cannot hold without blocking.
	a := newTransport(t, Config{Self: "a", Queue: 4, MinBackoff: time.Second, MaxBackoff: time.Second,
		Peers: map[strategy.NodeID]string{"b": "127.0.0.1:1"}})
	start := time.Now()
	for range 100 {
		if err := a.Send("b", cluster.Frame{Rule: "r", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 Sends took %v", d)
	}
	if st := a.Stats(); st.Dropped < 90 {
		t.Fatalf("stats %+v, want most frames dropped", st)
	}
}

func TestFaulty(t *testing.T) {
	_, trs, boxes := mesh(t, 2, nil)
	f := cluster.NewFaulty(trs["n0"], 1)
	if err := f.SetFaults(cluster.FrameFaults{Duplicate: 1, Delay: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := f.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("dup")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two copies", func() bool {
		n := 0
		for _, fr := range boxes["n1"].snapshot() {
			if string(fr.Payload) == "dup" && fr.From == "n0" {
				n++
			}
		}
		return n == 2
	})
	if err := f.SetFaults(cluster.FrameFaults{Blocked: []strategy.NodeID{"n1"}}); err != nil {
		t.Fatal(err)
	}
	_ = f.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("blocked")})
	time.Sleep(50 * time.Millisecond)
	if boxes["n1"].has("n0", "r", "blocked") {
		t.Fatal("a blocked frame arrived")
	}
	if st := f.Stats(); st.Blocked != 1 || st.Duplicated != 1 {
		t.Fatalf("fault stats %+v", st)
	}
	f.Close()
	if err := trs["n0"].Send("n1", cluster.Frame{}); err != cluster.ErrTransportClosed {
		t.Fatalf("Send after Close: %v, want ErrTransportClosed", err)
	}
}

func TestOwnerClusterOverGRPC(t *testing.T) {
	ids, trs, _ := mesh(t, 3, nil)
	epoch := time.Now()
	r := rule.Rule{Name: "api", Rate: bucket.Rate{Tokens: 1, Per: time.Hour}, Burst: 5, Strategy: "owner",
		Params: []string{"hold=0s", "timeout=3s"}}
	nodes := map[strategy.NodeID]*cluster.Node{}
	for _, id := range ids {
		n, err := cluster.New(cluster.Config{Self: id, Members: ids, Rules: []rule.Rule{r},
			Transport: cluster.NewFaulty(trs[id], 1), Seed: 7, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		nodes[id] = n
		t.Cleanup(func() { n.Close() })
	}
	var key string
	for i := range 1000 {
		if k := fmt.Sprintf("key-%d", i); rendezvous.Owner(k, ids) == "n1" {
			key = k
			break
		}
	}
	check := func(n *cluster.Node) cluster.CheckResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := n.Check(ctx, "api", key, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := range 5 {
		if d := check(nodes["n0"]); !d.Allowed || !d.Async {
			t.Fatalf("request %d via n0: %+v, want allowed by the owner n1", i, d)
		}
	}
	if d := check(nodes["n2"]); d.Allowed || !d.Async {
		t.Fatalf("request via n2: %+v, want the owner's refusal", d)
	}
	if d := check(nodes["n1"]); d.Allowed || d.Async {
		t.Fatalf("request at the owner: %+v, want a synchronous refusal", d)
	}
	if got := nodes["n1"].Stats().Rules["api"].MessagesReceived; got != 6 {
		t.Fatalf("owner received %d forwards, want 6", got)
	}
}

// testCA issues certificates for node ids (internal/pki).
type testCA struct {
	*pki.CA
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := pki.NewCA("tokenmesh test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{CA: ca, pool: ca.Pool()}
}

// config is an mTLS config for node id with a certificate naming it,
// trusting ca's certificates (trust, when not nil, instead).
func (ca *testCA) config(t *testing.T, id strategy.NodeID, trust *x509.CertPool) *tls.Config {
	t.Helper()
	iss, err := ca.Issue(string(id), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if trust == nil {
		trust = ca.pool
	}
	return &tls.Config{Certificates: []tls.Certificate{iss.TLS},
		RootCAs: trust, ClientCAs: trust, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

func TestMTLS(t *testing.T) {
	ca := newCA(t)
	ids, trs, boxes := mesh(t, 2, func(id strategy.NodeID) *tls.Config { return ca.config(t, id, nil) })
	_ = trs[ids[0]].Send(ids[1], cluster.Frame{Rule: "r", Payload: []byte("secure")})
	_ = trs[ids[1]].Send(ids[0], cluster.Frame{Rule: "r", Payload: []byte("back")})
	eventually(t, "n0->n1 over mTLS", func() bool { return boxes["n1"].has("n0", "r", "secure") })
	eventually(t, "n1->n0 over mTLS", func() bool { return boxes["n0"].has("n1", "r", "back") })

	// A member name with a certificate from another CA is refused by the
	// TLS handshake; a valid certificate naming another node is refused
	// for claiming a name it does not hold.
	rogueCA := newCA(t)
	book := map[strategy.NodeID]string{"n1": trs["n1"].Addr()}
	rogue := newTransport(t, Config{Self: "n0", Peers: book, TLS: rogueCA.config(t, "n0", ca.pool)})
	liar := newTransport(t, Config{Self: "n0", Peers: book, TLS: ca.config(t, "n9", nil)})
	for range 20 {
		_ = rogue.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("rogue")})
		_ = liar.Send("n1", cluster.Frame{Rule: "r", Payload: []byte("liar")})
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, "the liar's refusal", func() bool { return trs["n1"].Stats().Refused > 0 })
	time.Sleep(50 * time.Millisecond)
	if boxes["n1"].has("n0", "r", "rogue") || boxes["n1"].has("n0", "r", "liar") {
		t.Fatal("a frame without a valid certificate for its sender was delivered")
	}
}
