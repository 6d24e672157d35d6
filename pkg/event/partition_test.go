package event

import "testing"

// The expected partitions come from the Java client itself (kafka-clients 4.4.0,
// BuiltInPartitioner.partitionForKey, i.e. toPositive(murmur2(key)) % n), so any standard
// producer that re-publishes a grab event with its key lands where our writers put it.
func TestPartitionOfMatchesJavaClient(t *testing.T) {
	tests := []struct {
		key           string
		on6, on3, on7 int
	}{
		{"1:1", 4, 1, 2},
		{"12:3", 0, 0, 1},
		{"7:3", 5, 2, 0},
		{"100:42", 3, 0, 6},
		{"123456789:987654321", 0, 0, 5},
		{"21", 0, 0, 3},
		{"foobar", 0, 0, 0},
		{"abc", 3, 0, 4},
		{"a-little-bit-long-string", 2, 2, 1},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			for n, want := range map[int]int{6: tc.on6, 3: tc.on3, 7: tc.on7} {
				if got := PartitionOf([]byte(tc.key), n); got != want {
					t.Errorf("PartitionOf(%q, %d) = %d, the Java client says %d", tc.key, n, got, want)
				}
			}
		})
	}
}
