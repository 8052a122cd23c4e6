package testenv

import (
	"cmp"
	"strconv"
	"strings"
)

// CompareStreamIDs orders two Redis stream ids, "<ms>-<seq>".
func CompareStreamIDs(a, b string) int {
	id := func(s string) (ms, seq uint64) {
		m, q, _ := strings.Cut(s, "-")
		ms, _ = strconv.ParseUint(m, 10, 64)
		seq, _ = strconv.ParseUint(q, 10, 64)
		return ms, seq
	}
	am, as := id(a)
	bm, bs := id(b)
	return cmp.Or(cmp.Compare(am, bm), cmp.Compare(as, bs))
}
