// Package adminclient calls the gateway's admin API the way the tools that drive a sale do
// (the fire drill, the dashboard check's crowd): JSON in and out, the admin token as a bearer.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Client is one gateway's admin listener.
type Client struct {
	Base  string // e.g. http://127.0.0.1:8081
	Token string // SECKILL_ADMIN_TOKEN
	HTTP  *http.Client
}

// Call sends body (nil: none) as JSON to path and decodes a 2xx answer into out (nil: drop
// it); any other status is an error carrying the answer.
func (c *Client) Call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Prize is one prize of a sale and its stock.
type Prize struct {
	Name  string `json:"name"`
	Stock int    `json:"stock"`
	// Admission "draw" with an EntryWindow ("8s") makes a draw prize; empty: first come.
	Admission   string `json:"admission,omitempty"`
	EntryWindow string `json:"entry_window,omitempty"`
}

// Sale is what CreateSale made.
type Sale struct {
	Activity, Session int64
	Prizes            []int64 // in the order asked for
}

// CreateSale creates an activity whose one session runs from start for length (per-user
// limit 1) with prizes, and preheats the session so its stock is in Redis before it opens.
func (c *Client) CreateSale(ctx context.Context, name string, start time.Time, length time.Duration, prizes []Prize) (Sale, error) {
	body := map[string]any{"name": name, "window_start": start.UTC().Format(time.RFC3339),
		"window_end": start.Add(length).UTC().Format(time.RFC3339), "interval": length.String(),
		"session_length": length.String(), "per_user_limit": 1, "prizes": prizes}
	var created struct {
		ID       int64 `json:"id"`
		Sessions []struct {
			ID int64 `json:"id"`
		} `json:"sessions"`
		Prizes []struct {
			ID int64 `json:"id"`
		} `json:"prizes"`
	}
	if err := c.Call(ctx, http.MethodPost, "/admin/v1/activities", body, &created); err != nil {
		return Sale{}, err
	}
	if len(created.Sessions) == 0 || len(created.Prizes) != len(prizes) {
		return Sale{}, fmt.Errorf("activity %d has %d sessions and %d prizes, want 1 and %d",
			created.ID, len(created.Sessions), len(created.Prizes), len(prizes))
	}
	s := Sale{Activity: created.ID, Session: created.Sessions[0].ID}
	for _, p := range created.Prizes {
		s.Prizes = append(s.Prizes, p.ID)
	}
	if err := c.Call(ctx, http.MethodPost, fmt.Sprintf("/admin/v1/sessions/%d/preheat", s.Session), nil, nil); err != nil {
		return Sale{}, err
	}
	return s, nil
}
