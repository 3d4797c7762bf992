package bucket

import (
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// charge is ChargeN on the reference model: the verdict of allow, and n
// taken whatever it is, down to -maxDebt (whole tokens above it).
func (r *refBucket) charge(now time.Duration, n, maxDebt int64) (bool, int64) {
	r.advance(now)
	need := new(big.Rat).SetInt64(n)
	allowed := need.Cmp(r.burst) <= 0 && r.level.Cmp(need) >= 0
	room := new(big.Rat).Add(r.level, new(big.Rat).SetInt64(maxDebt))
	whole := new(big.Int).Quo(room.Num(), room.Denom()) // >= 0 here: truncation is floor
	if room.Sign() < 0 {
		whole.SetInt64(0)
	}
	taken := min(n, whole.Int64())
	r.level.Sub(r.level, new(big.Rat).SetInt64(taken))
	return allowed, taken
}

// TestChargeNMatchesReference: for any rate, burst, debt bound and
// history of charges (sizes up to three bursts, times in order), ChargeN
// gives the reference model's verdict and takes what it takes; with a
// debt bound no charge reaches, every token asked for is taken (none
// lost); and the admitted tokens over any window stay within b + r*T.
func TestChargeNMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Rate{Tokens: rapid.Int64Range(1, 1000).Draw(t, "tokens"), Per: time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "per"))}
		burst := rapid.Int64Range(1, 50).Draw(t, "burst")
		maxDebt := rapid.Int64Range(1, 500).Draw(t, "max_debt")
		b, err := New(r, burst, 0)
		if err != nil {
			t.Skip(err)
		}
		ref := newRef(r, burst, 0)
		type admit struct {
			at time.Duration
			n  int64
		}
		var admitted []admit
		var asked, taken int64
		now := time.Duration(0)
		for i, n := 0, rapid.IntRange(1, 60).Draw(t, "charges"); i < n; i++ {
			now += time.Duration(rapid.Int64Range(0, int64(r.Per)*2).Draw(t, "gap"))
			k := rapid.Int64Range(1, 3*burst).Draw(t, "n")
			ok, got := b.ChargeN(now, k, maxDebt)
			rok, rgot := ref.charge(now, k, maxDebt)
			if ok != rok || got != rgot {
				t.Fatalf("charge %d of %d at %v: (%v, %d), reference (%v, %d)", i, k, now, ok, got, rok, rgot)
			}
			asked += k
			taken += got
			if ok {
				admitted = append(admitted, admit{now, k})
			}
			if lvl, _ := b.Level(); lvl < -b.DebtTicks(maxDebt) {
				t.Fatalf("level %d ticks below the debt bound of %d tokens", lvl, maxDebt)
			}
		}
		if maxDebt >= asked && taken != asked {
			t.Fatalf("%d tokens charged, %d taken, with a debt bound of %d no charge reaches", asked, taken, maxDebt)
		}
		for i := range admitted {
			sum := new(big.Rat)
			for j := i; j < len(admitted); j++ {
				sum.Add(sum, new(big.Rat).SetInt64(admitted[j].n))
				T := new(big.Rat).SetFrac64(int64(admitted[j].at-admitted[i].at)*r.Tokens, int64(r.Per))
				bound := new(big.Rat).Add(T, new(big.Rat).SetInt64(burst))
				if sum.Cmp(bound) > 0 {
					t.Fatalf("admitted %v tokens in [%v, %v], above b + r*T = %v", sum, admitted[i].at, admitted[j].at, bound)
				}
			}
		}
	})
}

// TestChargeNDebtRepaid: a 1-token/s bucket of burst 5 charged 12 tokens
// at once admits nothing more until the refill has repaid the debt of 7
// and refilled one token (8 s), and then one token a second again.
func TestChargeNDebtRepaid(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 5, 0)
	if ok, got := b.ChargeN(0, 12, 10); ok || got != 12 {
		t.Fatalf("12 tokens on 5: (%v, %d), want refused and all 12 taken", ok, got)
	}
	if ok, got := b.ChargeN(7999*time.Millisecond, 1, 10); ok || got != 1 {
		t.Fatalf("at 7.999 s: (%v, %d), want refused (the debt is not repaid yet), 1 taken", ok, got)
	}
	// The refused check took a token too: the key opens a second later.
	if ok, _ := b.ChargeN(8*time.Second, 1, 10); ok {
		t.Fatal("at 8 s after a refused check: admitted")
	}
	if ok, _ := b.ChargeN(10*time.Second, 1, 10); !ok {
		t.Fatal("at 10 s: refused, want the debt repaid")
	}
}

// TestChargeNDebtBound: a charge beyond the debt bound takes only down
// to it; the rest is forgiven.
func TestChargeNDebtBound(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 5, 0)
	if _, got := b.ChargeN(0, 100, 20); got != 25 {
		t.Fatalf("100 on 5 with max_debt 20: took %d, want 25", got)
	}
	if got := b.Overdraw(0, 3, 20); got != 0 {
		t.Fatalf("at the bound: Overdraw took %d, want 0", got)
	}
	if lvl, _ := b.Level(); lvl != -20*int64(time.Second) {
		t.Fatalf("level %d, want -20 tokens", lvl)
	}
}

// TestRefund: a refund raises the level, never above the burst.
func TestRefund(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Minute}, 10, 0)
	b.AllowN(0, 8)
	if c := b.Refund(0, 3); c != 3*int64(time.Minute) {
		t.Fatalf("credited %d ticks, want 3 tokens", c)
	}
	if got := b.Tokens(0); got != 5 {
		t.Fatalf("tokens %v after the refund, want 5", got)
	}
	if c := b.Refund(0, 100); c != 5*int64(time.Minute) || b.Tokens(0) != 10 {
		t.Fatalf("refund of 100: credited %d ticks, %v tokens; want 5 tokens, capped at the burst 10", c, b.Tokens(0))
	}
	if c := b.Refund(0, 1); c != 0 {
		t.Fatalf("refund into a full bucket credited %d", c)
	}
}

// TestMergeLevelFloor: a copy in debt beyond one burst is refused by
// MergeLevel and kept by MergeLevelFloor within the rule's floor.
func TestMergeLevelFloor(t *testing.T) {
	b := MustNew(Rate{Tokens: 1, Per: time.Second}, 5, 0)
	floor := b.FloorTicks(20)
	if floor != -20*int64(time.Second) {
		t.Fatalf("floor %d, want -20 tokens", floor)
	}
	debt := -12 * int64(time.Second)
	if err := b.MergeLevel(debt, 0); err == nil {
		t.Fatal("MergeLevel took a level below minus the burst")
	}
	if err := b.MergeLevelFloor(debt, 0, floor); err != nil {
		t.Fatal(err)
	}
	if lvl, _ := b.Level(); lvl != debt {
		t.Fatalf("level %d, want %d", lvl, debt)
	}
	if err := b.MergeLevelFloor(floor-1, 0, floor); err == nil {
		t.Fatal("a level below the floor was taken")
	}
	// From 30 s ahead: 30 tokens lower, not below the floor.
	c := MustNew(Rate{Tokens: 1, Per: time.Second}, 5, 0)
	if err := c.MergeLevelAtFloor(0, 0, 30*time.Second, floor); err != nil {
		t.Fatal(err)
	}
	if lvl, _ := c.Level(); lvl != floor {
		t.Fatalf("copy from ahead: level %d, want the floor %d", lvl, floor)
	}
	if got := b.FloorTicks(2); got != -5*int64(time.Second) {
		t.Fatalf("FloorTicks(2) = %d, want minus the burst", got)
	}
}
