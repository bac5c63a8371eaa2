package uverbs

// The anonymous struct of ib_uverbs_odp_caps has no C name for cgo to print;
// the typedef in types_linux.go gives it one, which the sed puts in its place.
//go:generate sh -c "go tool cgo -godefs types_linux.go | sed -E 's/_Ctype_struct___[0-9]+/OdpPerTransportCaps/' | gofmt > ztypes_linux.go && rm -rf _obj _cgo_*.o"
