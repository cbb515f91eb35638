package rcconf

// Suggest returns the candidate closest to name, for a did-you-mean in
// an error or warning, and whether one is close enough to be worth
// saying: at most 2 edits (insertions, deletions, substitutions or
// transpositions of adjacent characters), and fewer than a third of
// name's length. Ties go to the earlier candidate.
func Suggest(name string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := editDistance(name, c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > 2 || 3*bestD >= len(name) {
		return "", false
	}
	return best, true
}

// editDistance is the optimal string alignment distance between a and b
// (Levenshtein plus adjacent transpositions), over bytes.
func editDistance(a, b string) int {
	// Three rows: the one before the previous is needed for transpositions.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
