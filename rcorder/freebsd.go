package rcorder

// This file reproduces the traversal of FreeBSD's rcorder(8) (2020 and
// later: sbin/rcorder/rcorder.c with -p), because on trees with cycles the
// levels it prints depend on the exact order in which its depth-first
// walk visits files. On acyclic trees the result is simply the longest
// path ("1 + the highest level among the requirements"), which Order
// checks against gonum's topological sort in the tests.
//
// What is reproduced, and why it matters:
//   - the file list is built by prepending, so the walk starts from the
//     last file on the command line;
//   - providers of a name and requirements of a file are also prepended
//     lists; BEFORE lines become requirements (on a private "fake"
//     provision of the declaring file) prepended to every provider;
//   - a file found "in progress" is processed again (FreeBSD only warns,
//     and its sequence counter is shared by both visits), and a
//     requirement whose provision is in progress is a loop: the remaining
//     providers are tried in list order, each searched on the stack of
//     requiring files from the most recent entry down; the current file
//     and the stack entries down to the hit get an "issue", and a file
//     with issues is given sequence max+1 ("pushed to the end"). When no
//     remaining provider is on the stack, the tracing fails and nobody
//     gets an issue;
//   - a provision's sequence is raised when a provider finishes, and a
//     re-entered file publishes its provisions at the end of its inner
//     visit, with the sequence it had then;
//   - a loop through a BEFORE line names the fake provision, as
//     "fake_prov_%08d";
//   - the file list unlinks a node twice when it was re-entered, which
//     relinks already finished files: FreeBSD walks them once more with
//     no requirements left, so they get sequence 1, or max+1 if they had
//     issues. The reference output (testdata/freebsd-probes.txt, tree t4)
//     shows exactly this.
//
// freebsd_ref_test.go holds a naive transliteration of rcorder.c, checked
// against the real FreeBSD output; the tests compare this emulator with
// it on thousands of random trees (TestFreeBSDReference and
// FuzzFreeBSDReference).
//
// Nothing here is a general graph algorithm: the graph itself is handled
// with gonum in order.go.

import (
	"fmt"
	"strings"
)

const nilIdx = -1

// maxLoopPath bounds the loop paths recorded for messages.
const maxLoopPath = 1024

type emuReq struct {
	prov int32 // provision index
	tok  int32 // index into Script.Requires, or -1 for a BEFORE requirement
}

type emuFile struct {
	inProgress bool
	visited    bool
	provsDone  bool
	reqs       []emuReq
	fakePN     []int32 // pnodes of its BEFORE (fake) provisions
	seq        int
	issues     int
}

type emuProv struct {
	name       string
	fake       bool  // created for a BEFORE line
	fakeNum    int32 // fake: FreeBSD names it fake_prov_%08d with this number
	declFile   int32 // fake: the file that declared BEFORE
	declTok    int32 // fake: index into Script.Before
	exists     bool  // FreeBSD: hash value != NULL (somebody provides it)
	inProgress bool
	seq        int
	head       int32 // sentinel pnode
}

type emuPnode struct {
	file, prov int32
	next, last int32
}

// emuEvent is a problem in the order FreeBSD meets it.
type emuEvent struct {
	missing bool
	file    int32   // missing: the requiring file
	tok     int32   // missing: index into Requires
	prov    int32   // loop: the provision found in progress
	path    []int32 // loop: files from the provider to the current one
}

type emulator struct {
	scripts []Script
	files   []emuFile
	provs   []emuProv
	pn      []emuPnode
	byName  map[string]int32
	fnext   []int32 // file list; node 0 is the head, file i is node i+1
	flast   []int32
	stack   []int32
	maxSeq  int
	events  []emuEvent
	unknown []unknownBefore
	loops   int // circular dependencies met (FreeBSD's exit status 1), re-entries included

	// Provision index of every token, per script: tokProv[tokOff[i]+k] is
	// Provides[k] of script i, followed by its Requires and its Before.
	tokOff  []int32
	tokProv []int32
	// The pnodes of script i's Provides are filePN[pnOff[i]:pnOff[i+1]].
	pnOff  []int32
	filePN []int32
}

// provIDs returns the provision indices of script i's Provides, Requires
// and Before tokens.
func (e *emulator) provIDs(i int) (prov, req, before []int32) {
	s := &e.scripts[i]
	t := e.tokProv[e.tokOff[i]:e.tokOff[i+1]]
	np, nr := len(s.Provides), len(s.Requires)
	return t[:np], t[np : np+nr], t[np+nr:]
}

type unknownBefore struct{ file, tok int32 }

func (e *emulator) provision(name string) (int32, bool) {
	if id, ok := e.byName[name]; ok {
		return id, false
	}
	id := e.newProv(name)
	e.byName[name] = id
	return id, true
}

func (e *emulator) newProv(name string) int32 {
	id := int32(len(e.provs))
	h := int32(len(e.pn))
	e.pn = append(e.pn, emuPnode{file: nilIdx, prov: id, next: nilIdx, last: nilIdx})
	e.provs = append(e.provs, emuProv{name: name, head: h, declFile: nilIdx, declTok: -1})
	return id
}

// addProvider prepends file f to the provider list of p (add_provide).
func (e *emulator) addProvider(f, p int32) {
	e.provs[p].exists = true
	h := e.provs[p].head
	id := int32(len(e.pn))
	e.pn = append(e.pn, emuPnode{file: f, prov: p, next: e.pn[h].next, last: h})
	if nx := e.pn[h].next; nx != nilIdx {
		e.pn[nx].last = id
	}
	e.pn[h].next = id
	// FreeBSD prepends to the file's prov_list; the order in which a
	// finished file releases its provisions has no observable effect.
	e.filePN = append(e.filePN, id)
}

// addFake makes file f the provider of its fake provision p.
func (e *emulator) addFake(f, p int32) {
	e.provs[p].exists = true
	h := e.provs[p].head
	id := int32(len(e.pn))
	e.pn = append(e.pn, emuPnode{file: f, prov: p, next: nilIdx, last: h})
	e.pn[h].next = id
	e.files[f].fakePN = append(e.files[f].fakePN, id)
}

func newEmulator(scripts []Script) *emulator {
	n := len(scripts)
	e := &emulator{
		scripts: scripts,
		files:   make([]emuFile, n),
		byName:  make(map[string]int32, 2*n),
		fnext:   make([]int32, n+1),
		flast:   make([]int32, n+1),
		provs:   make([]emuProv, 0, 2*n),
		pn:      make([]emuPnode, 0, 4*n),
	}
	// filenode_new prepends every file to the list.
	e.fnext[0], e.flast[0] = nilIdx, nilIdx
	for i := 0; i < n; i++ {
		node := int32(i + 1)
		e.fnext[node] = e.fnext[0]
		if e.fnext[node] != nilIdx {
			e.flast[e.fnext[node]] = node
		}
		e.flast[node] = 0
		e.fnext[0] = node
	}
	// crunch_file: header lines in file order; requirements prepended.
	// The per-file lists are built in token order and reversed, which is
	// the same as prepending each one. All lists share one allocation.
	total := 0
	nreq := 0
	for i := range scripts {
		s := &scripts[i]
		total += len(s.Provides) + len(s.Requires) + len(s.Before)
		nreq += len(s.Requires)
	}
	e.tokOff = make([]int32, n+1)
	e.pnOff = make([]int32, n+1)
	e.filePN = make([]int32, 0, total)
	e.tokProv = make([]int32, 0, total)
	allReqs := make([]emuReq, nreq)
	for i := range scripts {
		s := &scripts[i]
		e.tokOff[i] = int32(len(e.tokProv))
		e.pnOff[i] = int32(len(e.filePN))
		for _, name := range s.Provides {
			p, _ := e.provision(name)
			e.tokProv = append(e.tokProv, p)
			e.addProvider(int32(i), p)
		}
		reqs := allReqs[:len(s.Requires):len(s.Requires)]
		allReqs = allReqs[len(s.Requires):]
		for k, name := range s.Requires {
			p, _ := e.provision(name)
			e.tokProv = append(e.tokProv, p)
			reqs[len(reqs)-1-k] = emuReq{prov: p, tok: int32(k)}
		}
		e.files[i].reqs = reqs
		for range s.Before {
			e.tokProv = append(e.tokProv, nilIdx) // filled in below
		}
	}
	e.tokOff[n] = int32(len(e.tokProv))
	e.pnOff[n] = int32(len(e.filePN))
	// insert_before: bl_list was built by prepending, so it is walked
	// from the last BEFORE token of the last file backwards; each new
	// requirement is prepended to the provider's list, so the one made
	// last ends up first.
	//
	// make_fake_provision numbers the fake provisions from 0 in that
	// order, skipping numbers whose name is already in the hash table;
	// only a tree that itself uses such names can hit one.
	var pre [][]emuReq
	fakeNum, fakeLike := int32(0), false
	if len(e.tokProv) > len(e.filePN)+nreq { // the tree has BEFORE lines
		for i := range scripts {
			if hasFakeName(&scripts[i]) {
				fakeLike = true
				break
			}
		}
	}
	for i := n - 1; i >= 0; i-- {
		s := &scripts[i]
		for k := len(s.Before) - 1; k >= 0; k-- {
			fake := e.newProv("")
			for fakeLike {
				if _, taken := e.byName[fakeName(fakeNum)]; !taken {
					break
				}
				fakeNum++
			}
			e.provs[fake].fakeNum = fakeNum
			fakeNum++
			e.provs[fake].fake = true
			e.provs[fake].declFile = int32(i)
			e.provs[fake].declTok = int32(k)
			e.provs[fake].name = s.Before[k]
			e.addFake(int32(i), fake)
			target, isNew := e.provision(s.Before[k])
			_, _, bt := e.provIDs(i)
			bt[k] = target
			if isNew {
				e.unknown = append(e.unknown, unknownBefore{file: int32(i), tok: int32(k)})
			}
			h := e.provs[target].head
			for pn := e.pn[h].next; pn != nilIdx; pn = e.pn[pn].next {
				if pre == nil {
					pre = make([][]emuReq, n)
				}
				f := e.pn[pn].file
				pre[f] = append(pre[f], emuReq{prov: fake, tok: -1})
			}
		}
	}
	for f, b := range pre {
		if len(b) == 0 {
			continue
		}
		reqs := make([]emuReq, 0, len(b)+len(e.files[f].reqs))
		for k := len(b) - 1; k >= 0; k-- {
			reqs = append(reqs, b[k])
		}
		e.files[f].reqs = append(reqs, e.files[f].reqs...)
	}
	return e
}

// run performs generate_ordering and returns the raw FreeBSD sequence
// number of every file.
func (e *emulator) run() []int {
	n := len(e.files)
	// FreeBSD loops while the list is not empty. The relinking described
	// above cannot loop forever on well-formed lists, but guard anyway.
	budget := 4*n + 16
	for e.fnext[0] != nilIdx && budget > 0 {
		budget--
		node := e.fnext[0]
		e.doFile(node - 1)
		if e.fnext[0] == node {
			e.fnext[0] = e.fnext[node]
		}
	}
	seq := make([]int, n)
	for i := range e.files {
		if !e.files[i].visited {
			// Unreachable with FreeBSD's list semantics; make sure every
			// file is still ordered (and printed exactly once).
			e.doFile(int32(i))
		}
		seq[i] = e.files[i].seq
	}
	return seq
}

func (e *emulator) doFile(f int32) {
	fl := &e.files[f]
	wasSet := fl.inProgress
	if wasSet {
		e.loops++ // "Circular dependency on file": a cycle, exit status 1
	}
	fl.inProgress = true
	e.stack = append(e.stack, f)

	reqs := fl.reqs
	fl.seq = 0
	for _, r := range reqs {
		e.satisfy(r, f)
		if p := &e.provs[r.prov]; p.exists && p.seq > fl.seq {
			fl.seq = p.seq
		}
	}
	fl.reqs = nil
	fl.seq++
	if fl.issues > 0 {
		fl.seq = e.maxSeq + 1
	}
	if fl.seq > e.maxSeq {
		e.maxSeq = fl.seq
	}
	if !fl.provsDone {
		fl.provsDone = true
		for _, id := range e.filePN[e.pnOff[f]:e.pnOff[f+1]] {
			e.release(id, fl.seq)
		}
		for _, id := range fl.fakePN {
			e.release(id, fl.seq)
		}
	}
	if !wasSet {
		fl.visited = true
	}
	// Unlink from the file list with the node's own (possibly stale)
	// pointers, exactly as FreeBSD does.
	node := f + 1
	if nx := e.fnext[node]; nx != nilIdx {
		e.flast[nx] = e.flast[node]
	}
	if ls := e.flast[node]; ls != nilIdx {
		e.fnext[ls] = e.fnext[node]
	}
	e.stack = e.stack[:len(e.stack)-1]
}

// release records that the provider behind pnode id finished with
// sequence seq and unlinks it from its provision's provider list.
func (e *emulator) release(id int32, seq int) {
	pn := e.pn[id]
	if p := &e.provs[pn.prov]; p.seq < seq {
		p.seq = seq
	}
	if pn.next != nilIdx {
		e.pn[pn.next].last = pn.last
	}
	if pn.last != nilIdx {
		e.pn[pn.last].next = pn.next
	}
}

func (e *emulator) satisfy(r emuReq, f int32) {
	p := &e.provs[r.prov]
	if !p.exists {
		e.events = append(e.events, emuEvent{missing: true, file: f, tok: r.tok, prov: r.prov})
		return
	}
	h := p.head
	if e.pn[h].next == nilIdx {
		return // already satisfied
	}
	if p.inProgress {
		e.loop(r.prov, f)
		return
	}
	// FreeBSD never resets in_progress: the loop below only ends when
	// every provider is done, and a provision with no provider left is
	// "already satisfied" above whatever the flag says.
	p.inProgress = true
	for e.pn[h].next != nilIdx {
		e.doFile(e.pn[e.pn[h].next].file)
	}
}

// loop records a circular dependency on provision p met by file f and
// marks the files on it, as generate_loop_for_req does. FreeBSD's stack
// holds the files whose requirement is being satisfied: every doFile
// frame above f, i.e. e.stack without its last entry (f itself). For each
// remaining provider of p in list order, the stack is searched from the
// most recent entry down; the first hit is the loop entry. f and every
// stack entry from the most recent down to the loop entry get an issue.
// When no remaining provider is on the stack, FreeBSD's tracing fails:
// nobody gets an issue and only the exit status changes.
func (e *emulator) loop(p int32, f int32) {
	stack := e.stack[:len(e.stack)-1]
	start := -1
	for pn := e.pn[e.provs[p].head].next; pn != nilIdx && start < 0; pn = e.pn[pn].next {
		provider := e.pn[pn].file
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i] == provider {
				start = i
				break
			}
		}
	}
	e.loops++
	if start < 0 {
		e.events = append(e.events, emuEvent{prov: p, file: f, tok: -1})
		return
	}
	e.files[f].issues++
	for _, s := range stack[start:] {
		e.files[s].issues++
	}
	// The path (loop entry, the stack above it, f, the loop entry again)
	// is kept to print FreeBSD's message for this loop; very long ones
	// are not (they would cost memory quadratic in the tree).
	var path []int32
	if len(stack)-start < maxLoopPath {
		path = make([]int32, 0, len(stack)-start+2)
		path = append(path, stack[start:]...)
		path = append(path, f, stack[start])
	}
	e.events = append(e.events, emuEvent{prov: p, path: path, file: f, tok: -1})
}

// fakeName is FreeBSD's name for its fake provision number k, which its
// messages print for a loop through a BEFORE line.
func fakeName(k int32) string { return fmt.Sprintf("fake_prov_%08d", k) }

// label is the provision's name as FreeBSD prints it.
func (e *emulator) label(p int32) string {
	if e.provs[p].fake {
		return fakeName(e.provs[p].fakeNum)
	}
	return e.provs[p].name
}

// hasFakeName reports whether a token of s could collide with a name of
// a fake provision.
func hasFakeName(s *Script) bool {
	for _, l := range [][]string{s.Provides, s.Requires, s.Before} {
		for _, t := range l {
			if strings.HasPrefix(t, "fake_prov_") {
				return true
			}
		}
	}
	return false
}
