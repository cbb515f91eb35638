package services

import (
	"fmt"
	"html"
	"io"
	"slices"
	"time"
)

// PlotSVG writes the boot timeline as a Gantt chart in SVG, in the spirit
// of systemd-analyze plot: one row per service that ran, ordered by start
// time, a bar from when it began starting to when it was done, coloured
// by its state, with a time axis.
func PlotSVG(w io.Writer, tl Timeline) error {
	spans := slices.Clone(tl.Spans)
	spans = slices.DeleteFunc(spans, func(s Span) bool { return s.Ready <= 0 && s.Start <= 0 && s.State != StateFailed })
	slices.SortStableFunc(spans, func(a, b Span) int { return int(a.Start - b.Start) })
	total := tl.Finished
	for _, s := range spans {
		total = max(total, s.Ready)
	}
	if total <= 0 {
		total = time.Millisecond
	}
	const (
		left   = 20
		label  = 180
		width  = 900
		rowH   = 20
		top    = 60
		bottom = 30
	)
	scale := float64(width) / float64(total)
	height := top + rowH*len(spans) + bottom
	pw := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	pw(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	pw(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+label+20, height)
	pw(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	pw(`<text x="%d" y="20" font-size="14" font-weight="bold">Keel boot: %v, %d services</text>`+"\n", left, tl.Finished.Round(time.Microsecond*100), len(spans))
	// Axis with about 10 ticks at a round step.
	step := niceStep(total / 10)
	for t := time.Duration(0); t <= total; t += step {
		x := left + int(float64(t)*scale)
		pw(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`+"\n", x, top-10, x, height-bottom)
		pw(`<text x="%d" y="%d" fill="#666" text-anchor="middle">%v</text>`+"\n", x, top-14, t)
	}
	for i, s := range spans {
		y := top + i*rowH
		x := left + int(float64(s.Start)*scale)
		bw := max(int(float64(s.Ready-s.Start)*scale), 2)
		pw(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s: %s, %v → %v</title></rect>`+"\n",
			x, y+3, bw, rowH-6, stateColor(s.State), html.EscapeString(s.Name), s.State, s.Start, s.Ready)
		pw(`<text x="%d" y="%d">%s (%v)</text>`+"\n", x+bw+4, y+rowH-6, html.EscapeString(s.Name), (s.Ready - s.Start).Round(time.Microsecond*10))
	}
	_, err := fmt.Fprintln(w, `</svg>`)
	return err
}

func niceStep(d time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Microsecond * 100, time.Microsecond * 200, time.Microsecond * 500, time.Millisecond,
		2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second} {
		if s >= d {
			return s
		}
	}
	return 30 * time.Second
}

func stateColor(s State) string {
	switch s {
	case StateRunning:
		return "#4c9a2a"
	case StateExited:
		return "#88b4e7"
	case StateFailed:
		return "#d9534f"
	case StateBlocked:
		return "#f0ad4e"
	}
	return "#aaa"
}
