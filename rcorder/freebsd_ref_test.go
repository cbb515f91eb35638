package rcorder

// A deliberately naive, line-by-line transliteration of FreeBSD 14's
// sbin/rcorder/rcorder.c (the 2020+ version with -p and -g), written for
// the tests only: pointers and singly/doubly linked lists exactly as in
// the C source, no attempt at speed. The production emulator in
// freebsd.go is compared with it on random trees (TestFreeBSDReference,
// FuzzFreeBSDReference), so a divergence in either shows up as a failing
// differential test rather than as a wrong level in the field.
//
// Differences from the C, all unobservable in levels and exit codes:
//   - input is already parsed (Script), and keywords are ignored;
//   - the hash table is a Go map; fake provisions are kept out of it
//     (FreeBSD skips fake names that collide with real ones, so no REQUIRE
//     can ever name one);
//   - the file list walk has a step budget: FreeBSD's stale-pointer
//     unlinking could in principle keep relinking a finished file forever;
//     when the budget runs out the result is flagged hung and compared
//     with nothing.

import (
	"fmt"
	"strings"
)

type refProvnode struct {
	head       bool
	inProgress bool
	sequence   int
	fnode      *refFilenode
	next, last *refProvnode
}

type refEntry struct {
	key   string
	value *refProvnode
}

type refReqnode struct {
	entry *refEntry
	next  *refReqnode
}

type refFProvnode struct {
	entry *refEntry
	pnode *refProvnode
	next  *refFProvnode
}

type refFilenode struct {
	filename   string
	idx        int
	next, last *refFilenode
	reqList    *refReqnode
	provList   *refFProvnode
	inProgress bool
	sequence   int
	issues     int
}

type refStrnodelist struct {
	next *refStrnodelist
	node *refFilenode
	s    string
}

type refRcorder struct {
	hash     map[string]*refEntry
	fnHead   refFilenode
	blList   *refStrnodelist
	fake     int
	maxSeq   int
	exitCode int
	msgs     []string // every warnx, without "rcorder: "
	out      []*refFilenode
	budget   int
	hung     bool
}

func (rc *refRcorder) createEntry(s string) (*refEntry, bool) {
	if e, ok := rc.hash[s]; ok {
		return e, false
	}
	e := &refEntry{key: s}
	rc.hash[s] = e
	return e, true
}

func (rc *refRcorder) warnx(format string, args ...any) {
	rc.msgs = append(rc.msgs, fmt.Sprintf(format, args...))
}

func (rc *refRcorder) filenodeNew(name string, idx int) *refFilenode {
	t := &refFilenode{filename: name, idx: idx}
	t.next = rc.fnHead.next
	if t.next != nil {
		t.next.last = t
	}
	t.last = &rc.fnHead
	rc.fnHead.next = t
	return t
}

func (rc *refRcorder) addRequire(f *refFilenode, s string) {
	entry, _ := rc.createEntry(s) // a new entry has value NULL
	f.reqList = &refReqnode{entry: entry, next: f.reqList}
}

func (rc *refRcorder) linkProvider(entry *refEntry, f *refFilenode) {
	head := entry.value
	if head == nil {
		head = &refProvnode{head: true}
		entry.value = head
	}
	p := &refProvnode{fnode: f, next: head.next, last: head}
	head.next = p
	if p.next != nil {
		p.next.last = p
	}
	f.provList = &refFProvnode{entry: entry, pnode: p, next: f.provList}
}

func (rc *refRcorder) addProvide(f *refFilenode, s string) {
	entry, _ := rc.createEntry(s)
	rc.linkProvider(entry, f)
}

func (rc *refRcorder) addBefore(f *refFilenode, s string) {
	rc.blList = &refStrnodelist{node: f, s: s, next: rc.blList}
}

func (rc *refRcorder) makeFakeProvision(f *refFilenode) *refEntry {
	entry := &refEntry{key: fmt.Sprintf("fake_prov_%08d", rc.fake)}
	rc.fake++
	rc.linkProvider(entry, f)
	return entry
}

func (rc *refRcorder) insertBefore() {
	for rc.blList != nil {
		bl := rc.blList.next
		fake := rc.makeFakeProvision(rc.blList.node)
		entry, isNew := rc.createEntry(rc.blList.s)
		if isNew {
			rc.warnx("file `%s' is before unknown provision `%s'", rc.blList.node.filename, rc.blList.s)
		}
		for pnode := entry.value; pnode != nil; pnode = pnode.next {
			if pnode.head {
				continue
			}
			pnode.fnode.reqList = &refReqnode{entry: fake, next: pnode.fnode.reqList}
		}
		rc.blList = bl
	}
}

func (rc *refRcorder) generateLoopForReq(stack *refStrnodelist, head *refProvnode, f *refFilenode) (string, bool) {
	var loopEntry *refStrnodelist
	depth := 0
	for pnode := head.next; pnode != nil; pnode = pnode.next {
		if loopEntry != nil {
			break
		}
		depth = 0
		for sp := stack; sp != nil; sp = sp.next {
			depth++
			if sp.node == pnode.fnode {
				loopEntry = sp
				break
			}
		}
	}
	if loopEntry == nil {
		return "", false
	}
	depth += 2
	rev := make([]string, depth)
	rev[depth-1] = loopEntry.node.filename
	rev[depth-2] = f.filename
	f.issues++
	sp := stack
	for i := depth - 3; i >= 0; i-- {
		rev[i] = sp.node.filename
		sp.node.issues++
		sp = sp.next
	}
	return strings.Join(rev, " -> "), true
}

func (rc *refRcorder) satisfyReq(r *refReqnode, f *refFilenode, stack *refStrnodelist) {
	head := r.entry.value
	if head == nil {
		rc.warnx("requirement `%s' in file `%s' has no providers.", r.entry.key, f.filename)
		rc.exitCode = 1
		return
	}
	if head.next == nil {
		return
	}
	if head.inProgress {
		rc.exitCode = 1
		buf, ok := rc.generateLoopForReq(stack, head, f)
		if !ok {
			rc.warnx("Circular dependency on provision `%s' in file `%s' (tracing has failed).", r.entry.key, f.filename)
			return
		}
		rc.warnx("Circular dependency on provision `%s': %s.", r.entry.key, buf)
		return
	}
	head.inProgress = true
	item := &refStrnodelist{next: stack, node: f}
	for head.next != nil && !rc.hung {
		rc.doFile(head.next.fnode, item)
	}
}

func (rc *refRcorder) doFile(f *refFilenode, stack *refStrnodelist) {
	if rc.budget--; rc.budget < 0 {
		rc.hung = true
		return
	}
	wasSet := false
	if f.inProgress {
		rc.warnx("Circular dependency on file `%s'.", f.filename)
		wasSet = true
		rc.exitCode = 1
	} else {
		f.inProgress = true
	}
	f.sequence = 0
	for r := f.reqList; r != nil; r = r.next {
		rc.satisfyReq(r, f, stack)
		if head := r.entry.value; head != nil && head.sequence > f.sequence {
			f.sequence = head.sequence
		}
	}
	f.reqList = nil
	f.sequence++
	if f.issues > 0 {
		f.sequence = rc.maxSeq + 1
	}
	if rc.maxSeq < f.sequence {
		rc.maxSeq = f.sequence
	}
	for p := f.provList; p != nil; p = p.next {
		head := p.entry.value
		if head.sequence < f.sequence {
			head.sequence = f.sequence
		}
		pn := p.pnode
		if pn.next != nil {
			pn.next.last = pn.last
		}
		if pn.last != nil {
			pn.last.next = pn.next
		}
	}
	f.provList = nil
	if !wasSet {
		rc.out = append(rc.out, f)
	}
	if f.next != nil {
		f.next.last = f.last
	}
	if f.last != nil {
		f.last.next = f.next
	}
	if f.issues > 0 {
		rc.warnx("`%s' was seen in circular dependencies for %d times.", f.filename, f.issues)
	}
}

// refResult is what the reference computes for one tree.
type refResult struct {
	seq      []int    // final sequence of each script (command-line index)
	printed  []bool   // appended to the output list (exactly once)
	exit     int      // exit status
	msgs     []string // every message, in order
	hung     bool     // the step budget ran out (FreeBSD would not terminate)
	fileList []*refFilenode
}

// freebsdReference runs the transliteration on scripts, in command-line order.
func freebsdReference(scripts []Script) refResult {
	rc := &refRcorder{hash: map[string]*refEntry{}, budget: 100*len(scripts) + 1000}
	nodes := make([]*refFilenode, len(scripts))
	for i := range scripts {
		s := &scripts[i]
		f := rc.filenodeNew(s.Path, i)
		nodes[i] = f
		for _, name := range s.Requires {
			rc.addRequire(f, name)
		}
		for _, name := range s.Provides {
			rc.addProvide(f, name)
		}
		for _, name := range s.Before {
			rc.addBefore(f, name)
		}
	}
	rc.insertBefore()
	for rc.fnHead.next != nil && !rc.hung {
		rc.doFile(rc.fnHead.next, nil)
	}
	res := refResult{seq: make([]int, len(scripts)), printed: make([]bool, len(scripts)), exit: rc.exitCode, msgs: rc.msgs, hung: rc.hung, fileList: nodes}
	for i, f := range nodes {
		res.seq[i] = f.sequence
	}
	for _, f := range rc.out {
		if res.printed[f.idx] {
			panic("printed twice")
		}
		res.printed[f.idx] = true
	}
	return res
}

// groups returns FreeBSD's -p lines (as sets, each sorted by command-line
// index) for the scripts printed.
func (r refResult) groups(scripts []Script) [][]string {
	return groupBySeq(scripts, r.seq, r.printed)
}

func groupBySeq(scripts []Script, seq []int, printed []bool) [][]string {
	idx := make([]int, 0, len(scripts))
	for i := range scripts {
		if printed == nil || printed[i] {
			idx = append(idx, i)
		}
	}
	// Stable sort by sequence keeps command-line order within a level.
	for a := 1; a < len(idx); a++ {
		for b := a; b > 0 && seq[idx[b-1]] > seq[idx[b]]; b-- {
			idx[b-1], idx[b] = idx[b], idx[b-1]
		}
	}
	var out [][]string
	for k, i := range idx {
		if k == 0 || seq[idx[k-1]] != seq[i] {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], scripts[i].Path)
	}
	return out
}
