package nldev

//go:generate sh -c "go tool cgo -godefs types_linux.go | gofmt > zconsts_linux.go && rm -rf _obj _cgo_*.o"
