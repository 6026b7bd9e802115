package router

import (
	"testing"
	"time"
)

// TestBucketSpreadsRefused: the bucket answers Burst at once and Rate a
// second after that; the requests it refuses together are told to come
// back over the seconds it needs to serve them, not all at once.
func TestBucketSpreadsRefused(t *testing.T) {
	b := newBucket(10, 20)
	now := time.Unix(1000, 0)
	for i := range 20 {
		if ok, _ := b.take(now); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	retries := map[time.Duration]int{}
	for range 30 {
		ok, retry := b.take(now)
		if ok {
			t.Fatal("past the burst: answered")
		}
		retries[retry]++
	}
	// 30 refused at 10 a second: promised slots over 3 s, 10 a second.
	want := map[time.Duration]int{time.Second: 10, 2 * time.Second: 10, 3 * time.Second: 10}
	for d, n := range want {
		if retries[d] != n {
			t.Fatalf("Retry-After counts %v, want %v", retries, want)
		}
	}
	if ok, _ := b.take(now.Add(time.Second)); !ok {
		t.Fatal("a second later: refused, want a token")
	}
}
