package main

import (
	"context"
	"testing"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

func TestCheck(t *testing.T) {
	s := &server{rule: "bench"}
	resp, err := s.Check(context.Background(), &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{
		{Rule: "bench", Key: "a"}, {Rule: "other", Key: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); len(r) != 2 || !r[0].GetAllowed() || r[0].GetError() != "" || r[1].GetAllowed() || r[1].GetError() == "" {
		t.Errorf("results %v: want the bench check admitted and the other refused with an error", r)
	}
	if _, err := s.Check(context.Background(), &tokenmeshv1.CheckRequest{}); err == nil {
		t.Error("an empty call was answered")
	}
}
