// Package releasetest proves dist/ by installing and running what it holds (make release-test,
// build tag releasetest): reproducibility and the signature, the tarball, the SBOMs, the .rpm's
// metadata, the .deb in a Debian container, and the image in podman, each against the
// simulator on loopback.
package releasetest
