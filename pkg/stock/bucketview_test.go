package stock

import "testing"

// SumSnapshots: one bucket is returned as it is (a prize without buckets reads as before);
// several are summed while every one is loaded, and read as not loaded (left -1) as soon as
// one is not, with their pending reservations still counted.
func TestSumSnapshots(t *testing.T) {
	one := Snapshot{SessionID: 1, PrizeID: 2, Loaded: true, Left: 3, Total: 5, Limit: 1, Pending: 1, Settled: 1, TTLMillis: 900}
	if got := SumSnapshots([]Snapshot{one}); got != one {
		t.Errorf("one bucket: %+v, want it unchanged", got)
	}
	b1 := Snapshot{SessionID: 1, PrizeID: 2, Loaded: true, Left: 2, Total: 4, Limit: 1, Pending: 2, TTLMillis: 800}
	want := Snapshot{SessionID: 1, PrizeID: 2, Loaded: true, Left: 5, Total: 9, Limit: 1, Pending: 3, Settled: 1, TTLMillis: 800}
	if got := SumSnapshots([]Snapshot{one, b1}); got != want {
		t.Errorf("two loaded buckets: %+v, want %+v", got, want)
	}
	gone := Snapshot{SessionID: 1, PrizeID: 2, Left: -1, Pending: 4}
	want = Snapshot{SessionID: 1, PrizeID: 2, Left: -1, Pending: 7, Settled: 1}
	if got := SumSnapshots([]Snapshot{one, b1, gone}); got != want {
		t.Errorf("one bucket not loaded: %+v, want %+v", got, want)
	}
	if got := SumSnapshots(nil); got.Loaded || got.Left != -1 {
		t.Errorf("no bucket: %+v, want not loaded", got)
	}
}
