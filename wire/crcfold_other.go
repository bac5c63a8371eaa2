//go:build !amd64 || purego

package wire

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p).
func updateIEEE(crc uint32, p []byte) uint32 {
	return updateIEEEGeneric(crc, p)
}
