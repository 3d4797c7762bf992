package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt's on-disk layout (go.etcd.io/bbolt v1.3, page.go and db.go), read
// here only to refuse a damaged file before bbolt trusts it: a page header
// is id uint64, flags uint16, count uint16, overflow uint32; a meta page's
// body (after the header) is magic, version, pageSize, flags (uint32
// each), root bucket (two uint64), freelist, pgid, txid, checksum (uint64
// each), the checksum an FNV-64a of the body before it. Native byte order
// (little-endian on every platform tokenmesh ships for).
const (
	pageHeaderSize   = 16
	metaMagic        = 0xED0CDAED
	metaChecksumAt   = 56 // bytes of the meta body the checksum covers
	freelistFlag     = 0x10
	noFreelist       = ^uint64(0)
	maxFreelistCount = 0xFFFF
)

// checkFreelist refuses (wrapping ErrCorrupt) a file whose bucket tree
// bbolt cannot walk safely (checkTree), or whose meta page in use (the
// valid one with the larger transaction id) points at a freelist page
// that does not fit the file, or whose
// page count says more ids than the page holds. bbolt copies the freelist
// into a slice of the count it reads there, so a flipped count made
// Open allocate gigabytes and the node be killed for memory (found by
// TestDamagedPages: one run in about nine took 24 GB). Ours; bbolt checks
// the meta pages' checksums but not the freelist's count.
func checkFreelist(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new store
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	return checkPages(f, path, size)
}

// checkPages is checkFreelist of the open file f (path, size bytes, not
// empty): its page size, the freelist of the meta page in use, its tree.
func checkPages(f io.ReaderAt, path string, size int64) error {
	pageSize := int64(os.Getpagesize())
	if m, ok := readMeta(f, 0); ok {
		pageSize = int64(m.pageSize)
	}
	if pageSize < 1024 || pageSize > 1<<20 {
		return fmt.Errorf("%w %s: page size %d", ErrCorrupt, path, pageSize)
	}
	if best := metaInUse(f, pageSize); best >= 0 {
		if m, ok := readMeta(f, best*pageSize); ok && m.freelist != noFreelist {
			if err := checkFreelistPage(f, size, pageSize, m.freelist); err != nil {
				return fmt.Errorf("%w %s: meta page %d: %v", ErrCorrupt, path, best, err)
			}
		}
	}
	if err := checkTree(f, size, pageSize); err != nil {
		return fmt.Errorf("%w %s: %v", ErrCorrupt, path, err)
	}
	return nil
}

// metaInUse is the meta page bbolt will use (0 or 1; -1: neither is
// valid): the valid one with the larger transaction id, as checkTree
// picks it. Only its freelist is checked: the other one's freelist
// page may have been reused since (bbolt frees the pages of the
// transaction before the last), and a process killed in the middle of
// a write leaves it overwritten (found by TestCrashMidSave: checking
// both refused a file bbolt opens as the last complete Save).
func metaInUse(f io.ReaderAt, pageSize int64) int64 {
	best, bestTx := int64(-1), uint64(0)
	for i := int64(0); i < 2; i++ {
		if m, ok := readMetaTree(f, i*pageSize); ok && (best < 0 || m.txid > bestTx) {
			best, bestTx = i, m.txid
		}
	}
	return best
}

type metaPage struct {
	pageSize uint32
	freelist uint64
}

// readMeta reads the meta page at off; false when it is not one (magic or
// checksum).
func readMeta(r io.ReaderAt, off int64) (metaPage, bool) {
	b := make([]byte, pageHeaderSize+metaChecksumAt+8)
	if _, err := r.ReadAt(b, off); err != nil {
		return metaPage{}, false
	}
	body := b[pageHeaderSize:]
	if binary.LittleEndian.Uint32(body[0:]) != metaMagic {
		return metaPage{}, false
	}
	h := fnv.New64a()
	h.Write(body[:metaChecksumAt])
	if h.Sum64() != binary.LittleEndian.Uint64(body[metaChecksumAt:]) {
		return metaPage{}, false
	}
	return metaPage{pageSize: binary.LittleEndian.Uint32(body[8:]), freelist: binary.LittleEndian.Uint64(body[32:])}, true
}

// checkFreelistPage checks the freelist page id against the file.
func checkFreelistPage(r io.ReaderAt, size, pageSize int64, id uint64) error {
	if id < 2 || id > uint64(size/pageSize) {
		return fmt.Errorf("freelist page %d outside the file's %d pages", id, size/pageSize)
	}
	off := int64(id) * pageSize
	h := make([]byte, pageHeaderSize+8)
	if _, err := r.ReadAt(h, off); err != nil {
		return fmt.Errorf("freelist page %d: %v", id, err)
	}
	flags := binary.LittleEndian.Uint16(h[8:])
	count := uint64(binary.LittleEndian.Uint16(h[10:]))
	overflow := int64(binary.LittleEndian.Uint32(h[12:]))
	if flags&freelistFlag == 0 {
		return fmt.Errorf("page %d is not a freelist page (flags %#x)", id, flags)
	}
	span := (overflow + 1) * pageSize
	if off+span > size {
		return fmt.Errorf("freelist page %d spans %d pages beyond the file", id, overflow+1)
	}
	idx := uint64(0)
	if count == maxFreelistCount {
		idx, count = 1, binary.LittleEndian.Uint64(h[pageHeaderSize:])
	}
	if count > uint64(span-pageHeaderSize)/8-idx {
		return fmt.Errorf("freelist page %d says %d free pages, it holds at most %d", id, count, uint64(span-pageHeaderSize)/8-idx)
	}
	return nil
}
