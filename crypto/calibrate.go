package crypto

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// calibrationBatch is the number of requests per Submit while measuring.
const calibrationBatch = 16

// calibrationRounds is the number of rounds per point; the best counts.
const calibrationRounds = 3

// calibrate measures p's encrypt throughput for every claimed algorithm at
// every CalibrationSizes entry through p's own sessions, with throwaway
// random keys and a fresh IV per request. Options.CalibrationBudget bounds
// the whole measurement (session setup included) against one deadline: each
// algorithm gets an equal share of the time that remains when it starts,
// each point an equal share of its algorithm's remainder, so an overrun by
// one point is taken back from the next ones instead of adding up. A point
// is the best of up to calibrationRounds rounds, as many as its share
// allows; every point runs at least one round of one batch, so a provider
// too slow to complete one batch per point within the budget overruns it
// by that floor only. A size above a capability's MaxData is measured at
// MaxData. On failure it returns the point that failed.
func (f *Framework) calibrate(ctx context.Context, p Provider, caps []Capability) (map[Algorithm][len(CalibrationSizes)]float64, string, error) {
	out := make(map[Algorithm][len(CalibrationSizes)]float64, len(caps))
	if len(caps) == 0 {
		return out, "", nil
	}
	deadline := time.Now().Add(f.opts.CalibrationBudget)
	// share returns the end of an equal share of what remains until end,
	// divided among n.
	share := func(end time.Time, n int) time.Time {
		now := time.Now()
		if !now.Before(end) {
			return now
		}
		return now.Add(end.Sub(now) / time.Duration(n))
	}
	timeout := f.selfTestTimeout()
	for ci, c := range caps {
		algEnd := share(deadline, len(caps)-ci)
		var t [len(CalibrationSizes)]float64
		sp := SessionParams{Alg: c.Alg, CipherKey: make([]byte, c.Alg.CipherKeyLen()), AuthKey: make([]byte, c.Alg.Auth.KeyLen())}
		rand.Read(sp.CipherKey)
		rand.Read(sp.AuthKey)
		w := newBatchWaiter()
		s, err := p.NewSession(sp, w.done)
		clear(sp.CipherKey)
		clear(sp.AuthKey)
		if err != nil {
			return out, fmt.Sprintf("%v: calibration session", c.Alg), err
		}
		var ctr uint64
		for i, size := range CalibrationSizes {
			if c.MaxData > 0 && size > c.MaxData {
				size = c.MaxData
			}
			size -= size % c.Alg.BlockSize()
			icv := c.Alg.ICVLen()
			buf := make([]byte, calibrationBatch*(size+icv))
			ivs := make([]byte, calibrationBatch*16)
			aad := make([]byte, 8)
			reqs := make([]*Request, calibrationBatch)
			for j := range reqs {
				d := buf[j*(size+icv):]
				reqs[j] = &Request{Dir: Encrypt, Data: d[: size : size+icv], ICV: d[size : size+icv], AAD: aad, IV: ivs[j*16 : j*16+c.Alg.IVLen()]}
			}
			// The best of a few rounds: one preemption of the measuring
			// goroutine (a shared machine) must not decide the selection.
			pointEnd := share(algEnd, len(CalibrationSizes)-i)
			for r := range calibrationRounds {
				var bytes int
				start := time.Now()
				roundEnd := share(pointEnd, calibrationRounds-r)
				for {
					for _, r := range reqs {
						ctr++
						if len(r.IV) >= 8 {
							binary.BigEndian.PutUint64(r.IV, ctr)
						}
					}
					if err := w.run(ctx, s, reqs, timeout); err != nil {
						s.Close(context.Background())
						return out, fmt.Sprintf("%v: calibration at %d bytes", c.Alg, size), err
					}
					for _, r := range reqs {
						if r.Status != StatusOK {
							s.Close(context.Background())
							return out, fmt.Sprintf("%v: calibration at %d bytes", c.Alg, size), fmt.Errorf("status %v: %v", r.Status, r.Err)
						}
					}
					bytes += size * len(reqs)
					if !time.Now().Before(roundEnd) {
						break
					}
				}
				t[i] = max(t[i], float64(bytes)/time.Since(start).Seconds())
				if !time.Now().Before(pointEnd) {
					break // at least one round; more while the share lasts
				}
			}
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err = s.Close(cctx)
		cancel()
		if err != nil {
			return out, fmt.Sprintf("%v: calibration close", c.Alg), err
		}
		out[c.Alg] = t
	}
	return out, "", nil
}
