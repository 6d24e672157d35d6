package stock

import (
	"strconv"

	"github.com/seckill-pipeline/seckill/pkg/seckill"
)

// reserveArgs are the admission script's keys (those of Keys.all, built without the keys the
// script does not take) and arguments for one grab. Split out of reserveCall so the grab hot
// path's allocation benchmark can count them without Redis.
// A grab of bucket b ≥ 1 (gr.Bucket of gr.Buckets) runs on that bucket's keys (BucketKeysFor).
func reserveArgs(gr seckill.Grab) ([]string, []any) {
	tag := "sk:{" + strconv.FormatInt(gr.SessionID, 10) + ":" + strconv.FormatInt(gr.PrizeID, 10) + "}:"
	if gr.Bucket != 0 {
		var buf [96]byte
		t := appendBucketTag(append(buf[:0], "sk:{"...), gr.SessionID, gr.PrizeID, gr.Bucket, gr.Buckets)
		tag = string(append(t, "}:"...))
	}
	keys := []string{tag + "meta", tag + "users", tag + "res", tag + "out"}
	return keys, []any{gr.RequestID, gr.UserID, gr.AdmittedAt.UnixMilli()}
}
