package crypto

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// calibrationBatch is the number of requests per Submit while measuring.
const calibrationBatch = 16

// calibrationRounds is the number of rounds per point; the best counts.
const calibrationRounds = 3

// calibrationGuardBatch is the batch of the rounds after the first once a
// point's share of the budget is spent.
const calibrationGuardBatch = calibrationBatch / 4

// calibrate measures p's encrypt throughput for every claimed algorithm at
// every CalibrationSizes entry through p's own sessions, with throwaway
// random keys and a fresh IV per request. Options.CalibrationBudget bounds
// the whole measurement (session setup included) against one deadline: each
// algorithm gets an equal share of the time that remains when it starts,
// each point an equal share of its algorithm's remainder and each of its
// calibrationRounds rounds an equal share of the point's remainder, so an
// overrun by one round is taken back from the following ones instead of
// adding up. A point is the best of its rounds, so that one preemption of
// the measuring goroutine on a shared machine does not decide the
// selection. Every round runs at least one batch: calibrationBatch requests
// for the first, calibrationGuardBatch for the others once the point's
// share is spent. A provider too slow for that floor within the budget
// overruns it by the floor only. A size above a capability's MaxData is
// measured at MaxData. On failure it returns the point that failed.
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
	// One set of buffers and requests for every point (a registration
	// should not leave a megabyte of garbage for the next GC cycle, which
	// would then run during the rebinds that follow it).
	const maxICV = 64
	buf := make([]byte, calibrationBatch*(slices.Max(CalibrationSizes[:])+maxICV))
	ivs := make([]byte, calibrationBatch*16)
	aad := make([]byte, 8)
	reqs := make([]*Request, calibrationBatch)
	for j := range reqs {
		reqs[j] = new(Request)
	}
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
			if icv > maxICV {
				return out, fmt.Sprintf("%v: calibration", c.Alg), fmt.Errorf("ICV of %d bytes: %w", icv, ErrInvalidRequest)
			}
			for j, r := range reqs {
				d := buf[j*(size+icv):]
				*r = Request{Dir: Encrypt, Data: d[: size : size+icv], ICV: d[size : size+icv], AAD: aad, IV: ivs[j*16 : j*16+c.Alg.IVLen()]}
			}
			// The best of a few rounds: one preemption of the measuring
			// goroutine (a shared machine) must not decide the selection.
			pointEnd := share(algEnd, len(CalibrationSizes)-i)
			for r := range calibrationRounds {
				var bytes int
				start := time.Now()
				roundEnd := share(pointEnd, calibrationRounds-r)
				batch := reqs
				if r > 0 && !start.Before(pointEnd) {
					// Out of time: a short guard round. It reads lower
					// than a full batch (less amortised), so it only
					// counts if the full round was preempted.
					batch = reqs[:calibrationGuardBatch]
				}
				for {
					for _, r := range batch {
						ctr++
						if len(r.IV) >= 8 {
							binary.BigEndian.PutUint64(r.IV, ctr)
						}
					}
					if err := w.run(ctx, s, batch, timeout); err != nil {
						s.Close(context.Background())
						return out, fmt.Sprintf("%v: calibration at %d bytes", c.Alg, size), err
					}
					for _, r := range batch {
						if r.Status != StatusOK {
							s.Close(context.Background())
							return out, fmt.Sprintf("%v: calibration at %d bytes", c.Alg, size), fmt.Errorf("status %v: %v", r.Status, r.Err)
						}
					}
					bytes += size * len(batch)
					if !time.Now().Before(roundEnd) {
						break
					}
				}
				t[i] = max(t[i], float64(bytes)/time.Since(start).Seconds())
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
