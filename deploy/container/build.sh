#!/bin/sh
# Builds what the softroce image adds to Debian 12 into DESTDIR (the first
# argument), from the source tree this script sits in:
#
#   DESTDIR/usr/local/bin/softroce
#   DESTDIR/opt/softroce/cache/softroce/libsoftroce-preload-HASH.so
#
# The preload library is the one `softroce serve` and `softroce run` give
# unmodified programs (LD_PRELOAD); it is built here, with the C compiler
# of the build stage, into the cache directory the image names in
# XDG_CACHE_HOME, so the running image needs no compiler. Its file name
# carries a hash of the source and of the compiler command ("cc", the
# default): CC is left unset so that the name is the one softroce looks
# for at run time.
#
# The Containerfile's build stage runs this script; deploy/containerfile_test.go
# runs the same RUN step on the CI machine.
set -eu
dest=${1:?usage: build.sh DESTDIR}
case $dest in /*) ;; *) dest=$(pwd)/$dest ;; esac
cd "$(dirname "$0")/../.."
unset CC
mkdir -p "$dest/usr/local/bin" "$dest/opt/softroce/cache"
go build -o "$dest/usr/local/bin/softroce" ./cmd/softroce
# softroce env builds the preload library into $XDG_CACHE_HOME/softroce
# on its way to printing the environment (no daemon needs to run).
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
XDG_CACHE_HOME="$dest/opt/softroce/cache" XDG_RUNTIME_DIR="$run" \
  "$dest/usr/local/bin/softroce" env >/dev/null 2>&1
ls "$dest"/opt/softroce/cache/softroce/libsoftroce-preload-*.so >/dev/null
chmod -R a+rX "$dest"
