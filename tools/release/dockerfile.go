// The image's recipe read from deploy/Dockerfile: FROM scratch, COPY, USER, EXPOSE, VOLUME,
// ENTRYPOINT, CMD, LABEL. Any other instruction (RUN above all) is refused: the image is
// assembled here, without a container build, so it must need none.
package release

import (
	"encoding/json"
	"fmt"
	"strings"
)

// recipe is what deploy/Dockerfile says the image holds and how it runs.
type recipe struct {
	Copies     []copyStep
	User       string
	Exposed    []string // "9867/tcp"
	Volumes    []string
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
}

// copyStep is one COPY: context sources into dst, owned by chown ("uid:gid", or root).
type copyStep struct {
	Sources []string
	Dst     string
	Chown   string
}

// parseDockerfile reads the recipe; continuation lines and comments are handled, JSON and
// shell forms of ENTRYPOINT, CMD and VOLUME accepted.
func parseDockerfile(text string) (recipe, error) {
	r := recipe{Labels: map[string]string{}}
	joined := strings.ReplaceAll(text, "\\\n", " ")
	sawFrom := false
	for n, line := range strings.Split(joined, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		args = strings.TrimSpace(args)
		var err error
		switch strings.ToUpper(instr) {
		case "FROM":
			if args != "scratch" {
				err = fmt.Errorf("FROM %s: only scratch can be assembled without a build", args)
			}
			sawFrom = true
		case "COPY":
			r.Copies, err = appendCopy(r.Copies, strings.Fields(args))
		case "USER":
			r.User = args
		case "EXPOSE":
			for _, p := range strings.Fields(args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				r.Exposed = append(r.Exposed, p)
			}
		case "VOLUME":
			if r.Volumes = strings.Fields(args); strings.HasPrefix(args, "[") {
				r.Volumes, err = execForm(args)
			}
		case "ENTRYPOINT":
			r.Entrypoint, err = execForm(args)
		case "CMD":
			r.Cmd, err = execForm(args)
		case "LABEL":
			for _, kv := range strings.Fields(args) {
				k, v, _ := strings.Cut(kv, "=")
				r.Labels[k] = strings.Trim(v, `"`)
			}
		default:
			err = fmt.Errorf("%s is not supported: the image is assembled without a container build", instr)
		}
		if err != nil {
			return recipe{}, fmt.Errorf("deploy/Dockerfile line %d: %w", n+1, err)
		}
	}
	if !sawFrom || len(r.Entrypoint) == 0 {
		return recipe{}, fmt.Errorf("deploy/Dockerfile: no FROM scratch or no ENTRYPOINT")
	}
	return r, nil
}

func appendCopy(steps []copyStep, f []string) ([]copyStep, error) {
	var s copyStep
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		v, ok := strings.CutPrefix(f[0], "--chown=")
		if !ok {
			return nil, fmt.Errorf("COPY option %s is not supported", f[0])
		}
		s.Chown, f = v, f[1:]
	}
	if len(f) < 2 {
		return nil, fmt.Errorf("COPY needs a source and a destination")
	}
	s.Sources, s.Dst = f[:len(f)-1], f[len(f)-1]
	if len(s.Sources) > 1 && !strings.HasSuffix(s.Dst, "/") {
		return nil, fmt.Errorf("COPY of several sources needs a destination ending in /")
	}
	return append(steps, s), nil
}

func execForm(args string) ([]string, error) {
	if strings.HasPrefix(args, "[") {
		var v []string
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			return nil, err
		}
		return v, nil
	}
	return []string{"/bin/sh", "-c", args}, nil
}
