package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"sync"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// faultHook wraps the node's peer transport in a cluster.Faulty
// (limiter.PeerConfig.WrapTransport; Config.FaultInjection); faulty is
// set once the node has started.
type faultHook struct {
	name   string // the node's name: its region (topology.Of) decides which frames cross the WAN
	seed   uint64
	faulty *cluster.Faulty
}

func (h *faultHook) wrap(t cluster.Transport) cluster.Transport {
	h.faulty = cluster.NewFaultyNode(t, strategy.NodeID(h.name), h.seed)
	return h.faulty
}

// faultSeed derives the Faulty transport's seed from the node's name, so
// each node draws its own (reproducible) losses.
func faultSeed(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// faultsRequest is the body of POST /debug/faults. Every field replaces
// the current value; an absent field is its zero value (no fault).
type faultsRequest struct {
	Blocked []string `json:"blocked"`  // node names whose frames this node drops
	Drop    float64  `json:"drop"`     // probability in [0, 1] that a frame is lost
	DelayMS int64    `json:"delay_ms"` // extra delay of every frame, ms, in [0, maxFaultDelayMS]
	// WANDelayMS is an extra delay, ms, in [0, maxFaultDelayMS], of every
	// frame to a peer in another region than this node's (regions from
	// the node names, topology.Of), on top of delay_ms.
	WANDelayMS int64 `json:"wan_delay_ms"`
	// WANJitterMS adds to each such frame a delay drawn uniformly from
	// [0, wan_jitter_ms) ms, in [0, maxFaultDelayMS].
	WANJitterMS int64 `json:"wan_jitter_ms"`
}

// maxFaultDelayMS bounds every delay of POST /debug/faults, ms
// (cluster.MaxFaultDelay, one hour).
const maxFaultDelayMS = int64(cluster.MaxFaultDelay / time.Millisecond)

// faultsResponse answers /debug/faults: the faults now in force and the
// counts of the Faulty transport.
type faultsResponse struct {
	Blocked     []string           `json:"blocked"`
	Drop        float64            `json:"drop"`
	DelayMS     int64              `json:"delay_ms"`
	WANDelayMS  int64              `json:"wan_delay_ms"`
	WANJitterMS int64              `json:"wan_jitter_ms"`
	Stats       cluster.FaultStats `json:"stats"`
}

// withFaults routes /debug/faults to the fault controls of f and every
// other request to next:
//
//	POST /debug/faults {"blocked":["n2"],"drop":0.1,"delay_ms":5,"wan_delay_ms":30,"wan_jitter_ms":10}
//	     -> 200 and the faults in force (faultsResponse), or 400 naming the bad field
//	GET  /debug/faults -> 200 and the faults in force
//
// wan_delay_ms and wan_jitter_ms delay only the frames to peers of another
// region (a node "eu.n0" delays those to "us.n2", not to "eu.n1"): a
// cluster on one machine emulates the WAN between its regions.
//
// It cuts the data plane only (the peer frames of the rules' strategies):
// gossip still flows, so memberlist still sees a blocked peer alive and
// the strategies keep it as a member (a partition, not a crash).
func withFaults(next http.Handler, f *cluster.Faulty) http.Handler {
	var mu sync.Mutex
	cur := faultsRequest{Blocked: []string{}}
	answer := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	bad := func(w http.ResponseWriter, msg string) {
		answer(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
	state := func() faultsResponse {
		return faultsResponse{Blocked: cur.Blocked, Drop: cur.Drop, DelayMS: cur.DelayMS,
			WANDelayMS: cur.WANDelayMS, WANJitterMS: cur.WANJitterMS, Stats: f.Stats()}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/faults", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		answer(w, http.StatusOK, state())
	})
	mux.HandleFunc("POST /debug/faults", func(w http.ResponseWriter, r *http.Request) {
		var req faultsRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				bad(w, fmt.Sprintf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value))
				return
			}
			bad(w, fmt.Sprintf("body: %v (want {\"blocked\":[\"n2\"],\"drop\":0.0,\"delay_ms\":0,\"wan_delay_ms\":0,\"wan_jitter_ms\":0})", err))
			return
		}
		if dec.More() {
			bad(w, "body: more than one JSON value")
			return
		}
		fl := cluster.FrameFaults{Drop: req.Drop, Delay: time.Duration(req.DelayMS) * time.Millisecond,
			WANDelay: time.Duration(req.WANDelayMS) * time.Millisecond, WANJitter: time.Duration(req.WANJitterMS) * time.Millisecond}
		for i, b := range req.Blocked {
			if b == "" {
				bad(w, fmt.Sprintf("blocked[%d]: is empty; want a node name", i))
				return
			}
			fl.Blocked = append(fl.Blocked, strategy.NodeID(b))
		}
		switch {
		case !(req.Drop >= 0 && req.Drop <= 1):
			bad(w, fmt.Sprintf("drop: %v is not a probability in [0, 1]", req.Drop))
			return
		case req.DelayMS < 0 || req.DelayMS > maxFaultDelayMS:
			bad(w, fmt.Sprintf("delay_ms: %d is not between 0 and %d", req.DelayMS, maxFaultDelayMS))
			return
		case req.WANDelayMS < 0 || req.WANDelayMS > maxFaultDelayMS:
			bad(w, fmt.Sprintf("wan_delay_ms: %d is not between 0 and %d", req.WANDelayMS, maxFaultDelayMS))
			return
		case req.WANJitterMS < 0 || req.WANJitterMS > maxFaultDelayMS:
			bad(w, fmt.Sprintf("wan_jitter_ms: %d is not between 0 and %d", req.WANJitterMS, maxFaultDelayMS))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if err := f.SetFaults(fl); err != nil {
			bad(w, err.Error())
			return
		}
		if req.Blocked == nil {
			req.Blocked = []string{}
		}
		cur = req
		answer(w, http.StatusOK, state())
	})
	mux.Handle("/", next)
	return mux
}
