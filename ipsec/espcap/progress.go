package espcap

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// progressInterval is how often the bar is redrawn.
const progressInterval = 100 * time.Millisecond

// progressWidth is the number of cells of the bar.
const progressWidth = 30

// TerminalProgress returns w if it is a terminal (a file whose descriptor
// is a TTY), else nil: a progress bar is for a person watching, not for a
// log or a pipe.
func TerminalProgress(w io.Writer) io.Writer {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return w
}

// progress draws a bar of the bytes read out of total on w, every
// progressInterval once delay has passed, until stop.
type progress struct {
	w     io.Writer
	total int64
	read  atomic.Int64
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	drawn bool // guarded by the drawing goroutine until wg.Wait
}

// startProgress starts drawing; the caller must call stop.
func startProgress(w io.Writer, total int64, delay time.Duration) *progress {
	p := &progress{w: w, total: total, done: make(chan struct{})}
	if delay <= 0 {
		p.draw()
	}
	p.wg.Add(1)
	go p.loop(delay)
	return p
}

func (p *progress) loop(delay time.Duration) {
	defer p.wg.Done()
	if delay > 0 {
		wait := time.NewTimer(delay)
		defer wait.Stop()
		select {
		case <-p.done:
			return
		case <-wait.C:
		}
	}
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		p.draw()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
}

// bar renders e.g. "[=========>          ]  33% 1.2/3.6 MB".
func bar(read, total int64) string {
	frac := 1.0
	if total > 0 {
		frac = min(float64(read)/float64(total), 1)
	}
	full := int(frac * progressWidth)
	cells := strings.Repeat("=", full)
	if full < progressWidth {
		cells += ">" + strings.Repeat(" ", progressWidth-full-1)
	}
	return fmt.Sprintf("[%s] %3.0f%% %.1f/%.1f MB", cells, frac*100, float64(read)/1e6, float64(total)/1e6)
}

func (p *progress) draw() {
	fmt.Fprintf(p.w, "\r%s", bar(p.read.Load(), p.total))
	p.drawn = true
}

// stop ends the drawing and erases the bar if one was drawn.
func (p *progress) stop() {
	p.once.Do(func() {
		close(p.done)
		p.wg.Wait()
		if p.drawn {
			p.draw() // the final state, then erase the line
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
}

// reader counts what r yields.
func (p *progress) reader(r io.Reader) io.Reader { return countingReader{r, p} }

type countingReader struct {
	r io.Reader
	p *progress
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.read.Add(int64(n))
	return n, err
}
