// The SBOM of a binary: CycloneDX JSON from cyclonedx-gomod's binary generator (the modules
// `go version -m` shows, their licenses from the module cache), with the serial number derived
// from the binary and the commit's time, so the same binary gives the same bytes.
package release

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/licensedetect/local"
	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// cyclonedxGomod names the generator in the SBOM's metadata; keep it equal to go.mod's.
const cyclonedxGomod = "v1.10.0"

// writeSBOM writes the CycloneDX JSON of the binary at binPath.
func writeSBOM(o Options, binPath string) ([]byte, error) {
	logger := zerolog.Nop()
	g, err := bin.NewGenerator(binPath,
		bin.WithLogger(logger),
		bin.WithLicenseDetector(local.NewDetector(logger)),
		bin.WithVersionOverride("v"+o.Version))
	if err != nil {
		return nil, err
	}
	bom, err := g.Generate()
	if err != nil {
		return nil, fmt.Errorf("sbom of %s: %w", binPath, err)
	}
	b, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	bom.SerialNumber = uuid.NewSHA1(uuid.NameSpaceURL, sum[:]).URN()
	bom.Metadata.Timestamp = o.Date.UTC().Format(time.RFC3339)
	bom.Metadata.Tools = &cdx.ToolsChoice{Components: &[]cdx.Component{{
		Type: cdx.ComponentTypeApplication, Group: "github.com/CycloneDX", Name: "cyclonedx-gomod", Version: cyclonedxGomod,
	}}}
	var out bytes.Buffer
	if err := cdx.NewBOMEncoder(&out, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
