// Package fairdraw holds the end-to-end checks of the fair sale's draw (package draw): the
// gateway, the consumer and the reconciler run as processes on the local stack
// (internal/harness), a crowd enters a draw prize's window, the reconciler freezes, ranks
// and admits the winners, and every entrant's place is checked from the public record and
// that entrant's proof alone, as `verify-draw` checks it. It has no code of its own: only
// its tests.
package fairdraw
