package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tokenmesh/tokenmesh/httplimit"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

func ExampleMiddleware_Wrap() {
	// An in-process node with rule "api": 1 per minute, burst 2. A service
	// in front of a tokenmesh cluster uses httplimit.GRPC instead.
	node, err := limiter.Start(context.Background(), limiter.Config{Name: "example",
		Rules: []rule.Rule{{Name: "api", Rate: rule.MustRate("1/min"), Burst: 2, Strategy: "owner"}}})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	mw, err := httplimit.New(httplimit.Options{Rule: "api", Key: "{header:x-api-key}",
		Checker: httplimit.LocalNode(node)})
	if err != nil {
		panic(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") }))
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Api-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))))
	}
	// Output:
	// 200 "api";r=1;t=60
	// 200 "api";r=0;t=120
	// 429 "api";r=0;t=120 60
}
