// Package deploy holds no Go code: its directory holds the container image
// definition of softroce (container/Containerfile and the build script it
// shares with CI, container/build.sh) and a Kubernetes manifest that runs
// unprivileged softroce pods (kubernetes/softroce-ring.yaml). Its tests
// check what can be checked without a registry or a cluster: they build
// the image with podman from local Debian 12 base images and run it
// unprivileged, run the image's build step on the host, resolve its
// packages, decode the manifest, check the fields docs/scale-out.md
// relies on, and run the manifest's pods as processes of an unprivileged
// user in network namespaces.
package deploy
