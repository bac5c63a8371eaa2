package preload

import (
	"testing"

	"github.com/softroce/softroce/uverbs"
)

// TestLibraryAnswersDoorbellsAsTheDaemon: the largest wqe_size of a
// doorbell the library answers itself is the one package uverbs takes
// (above it the daemon answers ENOMEM, as ib_uverbs_post_send).
func TestLibraryAnswersDoorbellsAsTheDaemon(t *testing.T) {
	checkDefines(t, map[string]uint64{"KMALLOC_MAX": uverbs.KmallocMax})
}
