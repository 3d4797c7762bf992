package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

// TestConcurrencyReleasesWhenHandlerReturns: limit 2 per key; two
// requests held in the handler take both permits, a third is refused
// (429, RateLimit-Policy q=2, no Retry-After) while another key is not;
// once one handler returns its permit is released and a new request gets
// through.
func TestConcurrencyReleasesWhenHandlerReturns(t *testing.T) {
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "n1", Rules: []rule.Rule{
		{Name: "conc", Rate: rule.MustRate("1/s"), Burst: 1, Strategy: "concurrency", Params: []string{"limit=2", "permit_ttl=50ms"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	time.Sleep(110 * time.Millisecond) // no permit within permit_ttl + join_wait of the start
	mw, err := New(Options{Rule: "conc", Key: "{header:x-tenant}", Checker: LocalNode(node), Concurrency: true})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-hold") != "" {
			entered <- struct{}{}
			<-hold
		}
	}))
	serve := func(tenant string, holdIt bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("x-tenant", tenant)
		if holdIt {
			r.Header.Set("x-hold", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); serve("a", true) }()
	}
	<-entered
	<-entered
	rec := serve("a", false)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Header().Get("RateLimit-Policy"), "q=2") || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("third request in flight: %d %v, want 429 with q=2 and no Retry-After", rec.Code, rec.Header())
	}
	if rec := serve("b", false); rec.Code != http.StatusOK {
		t.Fatalf("another key: %d", rec.Code)
	}
	hold <- struct{}{} // one handler returns
	deadline := time.Now().Add(2 * time.Second)
	for serve("a", false).Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the permit of a finished handler was never released")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(hold)
	wg.Wait()
	if _, err := New(Options{Rule: "conc", Checker: CheckerFunc(func(context.Context, string, string, int64) (Result, error) { return Result{}, nil }), Concurrency: true}); err == nil || !strings.Contains(err.Error(), "Options.Concurrency") {
		t.Fatalf("a Checker without Acquire: %v", err)
	}
}
