package builtin

import (
	"fmt"
	"strings"

	"github.com/keelinit/keel/ipsec"
)

// maxUnboundNamed bounds how many SAs unboundStatus names.
const maxUnboundNamed = 4

// unboundStatus is why the ipsec service is degraded when SAs have no
// crypto provider (kldunload -f removed the last provider of their
// algorithm), e.g. "2 SA(s) with (no provider) (spi 0x1001, 0x1002):
// traffic on them is dropped as no-provider"; "" when every SA is bound.
func unboundStatus(sas []ipsec.SAStatus) string {
	var spis []string
	for _, sa := range sas {
		if sa.Provider == "" {
			spis = append(spis, fmt.Sprintf("0x%x", sa.SPI))
		}
	}
	if len(spis) == 0 {
		return ""
	}
	n := len(spis)
	if n > maxUnboundNamed {
		spis = append(spis[:maxUnboundNamed], "...")
	}
	return fmt.Sprintf("%d SA(s) with %s (spi %s): traffic on them is dropped as %s",
		n, NoProvider, strings.Join(spis, ", "), ipsec.DropNoProvider)
}
