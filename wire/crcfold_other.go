//go:build !amd64 || purego

package wire

// haveFold is false: the vectorised pass is amd64 assembly.
const haveFold = false

// foldMin is the shortest input the amd64 pass takes.
const foldMin = 64

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p).
func updateIEEE(crc uint32, p []byte) uint32 {
	return updateIEEEGeneric(crc, p)
}

// updateIEEEOnes returns false: the bits of ones are set by the caller's
// other means.
func updateIEEEOnes(crc uint32, p []byte, ones *[64]byte) (uint32, bool) {
	return 0, false
}
