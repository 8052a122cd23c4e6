package store

import (
	"slices"
	"testing"
)

// A folded key's packed events unpack to the events the fold packed, a
// value written "=" to the job's as its hash holds it, and
// a malformed packing is an error, never a panic or made-up events.
func TestUnpackEvents(t *testing.T) {
	t.Parallel()
	result := `{"text":"say \"hi\" back"}`
	held := []string{"1796000000020", "1796000000012", "0", "", "17", "e-1", "w-1", "1", "1796000000012", "1796000000019", "1796000000020"}
	got, err := unpackEvents([]string{
		"1796000000000-0", "state", "",
		"+12", "s", `running,1,,17,0,,w-1`,
		"+0", "s", `running,1,,=,=,,=,=,=,=,=,1796000000012,`,
		"+0-1", "o", "9,10",
		"+1", "o", "19,5",
		"+0-4", "output", `{"text":"!"}`,
		"1796000000020-3", "progress", `{}`,
		"+0", "s", `succeeded,1,=,=,=,,=,=,=,=,=,=,=`,
	}, result, held)
	want := []string{
		"1796000000000-0", "state", "",
		"1796000000012-0", "state", `{"state":"running","attempt":1,"job":["","17","0","","w-1"]}`,
		"1796000000012-0", "state", `{"state":"running","attempt":1,"job":["","1796000000012","0","","17","e-1","w-1","1","1796000000012","1796000000012",""]}`,
		"1796000000012-1", "output", `{"text":"say \"hi\""}`,
		"1796000000013-0", "output", `{"text":" back"}`,
		"1796000000013-4", "output", `{"text":"!"}`,
		"1796000000020-3", "progress", `{}`,
		"1796000000020-0", "state", `{"state":"succeeded","attempt":1,"job":["1796000000020","1796000000012","0","","17","e-1","w-1","1","1796000000012","1796000000019","1796000000020"]}`,
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("unpacked %q, %v\nwant %q", got, err, want)
	}
	for _, packed := range [][]string{
		{"1796000000000-0", "state"},            // not three strings an event
		{"x-0", "state", ""},                    // a full id that is not one
		{"1-0", "state", "", "+x", "state", ""}, // a step that is not a number
		{"1-0", "state", "", "+1-x", "state", ""},
		{"1-0", "state", "", "+-1", "state", ""},
		{"1-0", "state", "", "+18446744073709551616", "state", ""},
		{"1-0", "state", "", "+18446744073709551615", "state", ""}, // past the largest id
		{"1-0", "s", "running,1"},                                  // no job values
		{"1-0", "s", "running"},
		{"1-0", "o", "26,1"},  // past the result's end
		{"1-0", "o", "20,10"}, // runs past it
		{"1-0", "o", "-1,2"},
		{"1-0", "o", "1"},
		{"1-0", "o", ""},
		{"1-0", "o", "1,18446744073709551615"},
		{"1-0", "s", "running,1,,=,=,=,=,=,=,=,=,=,=,="}, // past the job values held
	} {
		if got, err := unpackEvents(packed, result, held); err == nil {
			t.Errorf("unpacked %q as %q, want an error", packed, got)
		}
	}
}
