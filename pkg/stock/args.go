package stock

import "github.com/seckill-pipeline/seckill/pkg/seckill"

// reserveArgs are the admission script's keys and arguments for one grab (split out of
// reserveCall so the grab hot path's allocation benchmark can count them without Redis).
func reserveArgs(gr seckill.Grab) ([]string, []any) {
	return KeysFor(gr.SessionID, gr.PrizeID).all(), []any{gr.RequestID, gr.UserID, gr.AdmittedAt.UnixMilli()}
}
