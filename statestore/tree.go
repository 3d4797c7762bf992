package statestore

import (
	"encoding/binary"
	"fmt"
	"io"
)

// More of bbolt's layout (v1.3 page.go, bucket.go, db.go): a meta page's
// version (uint32 at body offset 4) must be 2, its root bucket's page id
// is at body offset 16, the file's high-water mark (pgid) at 40 and the
// transaction id at 48. A branch or leaf page holds count elements of 16
// bytes after its header: a branch element is pos, ksize (uint32) and the
// child's page id (uint64); a leaf element is flags, pos, ksize, vsize
// (uint32), its key pos bytes after the element's own start and its value
// right after the key. A leaf element flagged as a bucket holds a bucket
// header (root page id, sequence: two uint64), followed by the bucket's
// one page inline when the root is 0.
const (
	metaVersion     = 2
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	bucketLeafFlag  = 0x01
	elementSize     = 16
	bucketHeader    = 16
	maxTreeDepth    = 64
	maxInlineNested = 8
)

// treeChecker walks the B+ tree of buckets a meta page points at, as
// bbolt would read it, refusing what would send bbolt's cursor astray: a
// page outside the file or above the high-water mark, a page that is not
// a branch or a leaf where one is expected, elements that do not fit
// their page, a page reached twice (a cycle or shared subtree), a tree
// deeper than maxTreeDepth. bbolt trusts all of these: a damaged branch
// page that points back at an ancestor makes Bucket.ForEach descend
// forever, growing its stack until the node is killed for memory (found
// by TestDamagedPages, -rapid.seed=3 -rapid.checks=1000). Ours.
type treeChecker struct {
	r        io.ReaderAt
	size     int64 // bytes in the file
	pageSize int64
	hwm      uint64 // the meta's pgid: pages at or above it are not in use
	seen     map[uint64]bool
}

// checkTree checks the tree of the meta page bbolt will use: of the two
// valid meta pages (magic, version, checksum), the one with the larger
// transaction id. No valid meta page: nothing to check (bbolt refuses the
// file itself).
func checkTree(r io.ReaderAt, size, pageSize int64) error {
	var best *metaTree
	for i := int64(0); i < 2; i++ {
		m, ok := readMetaTree(r, i*pageSize)
		if ok && (best == nil || m.txid > best.txid) {
			best = &m
		}
	}
	if best == nil {
		return nil
	}
	c := treeChecker{r: r, size: size, pageSize: pageSize, hwm: best.pgid, seen: map[uint64]bool{}}
	if err := c.page(best.root, 0); err != nil {
		return fmt.Errorf("meta (txid %d): %w", best.txid, err)
	}
	return nil
}

type metaTree struct {
	root, pgid, txid uint64
}

// readMetaTree reads the tree fields of the meta page at off; false when
// it is not a valid meta page (readMeta's checks and the version).
func readMetaTree(r io.ReaderAt, off int64) (metaTree, bool) {
	if _, ok := readMeta(r, off); !ok {
		return metaTree{}, false
	}
	b := make([]byte, pageHeaderSize+metaChecksumAt)
	if _, err := r.ReadAt(b, off); err != nil {
		return metaTree{}, false
	}
	body := b[pageHeaderSize:]
	if binary.LittleEndian.Uint32(body[4:]) != metaVersion {
		return metaTree{}, false
	}
	return metaTree{
		root: binary.LittleEndian.Uint64(body[16:]),
		pgid: binary.LittleEndian.Uint64(body[40:]),
		txid: binary.LittleEndian.Uint64(body[48:]),
	}, true
}

// page checks the page id (a bucket's root or a branch's child) and all
// it reaches.
func (c *treeChecker) page(id uint64, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("page %d: tree deeper than %d", id, maxTreeDepth)
	}
	if id < 2 || id >= c.hwm || id >= uint64(c.size/c.pageSize) {
		return fmt.Errorf("page %d outside the file's %d pages in use", id, min(c.hwm, uint64(c.size/c.pageSize)))
	}
	h := make([]byte, pageHeaderSize)
	off := int64(id) * c.pageSize
	if _, err := c.r.ReadAt(h, off); err != nil {
		return fmt.Errorf("page %d: %v", id, err)
	}
	if got := binary.LittleEndian.Uint64(h); got != id {
		return fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(binary.LittleEndian.Uint32(h[12:]))
	if overflow >= c.hwm-id || off+int64(overflow+1)*c.pageSize > c.size {
		return fmt.Errorf("page %d spans %d pages beyond the file", id, overflow+1)
	}
	for p := id; p <= id+overflow; p++ {
		if c.seen[p] {
			return fmt.Errorf("page %d reached twice (a cycle or a shared page)", p)
		}
		c.seen[p] = true
	}
	buf := make([]byte, int64(overflow+1)*c.pageSize)
	if _, err := c.r.ReadAt(buf, off); err != nil {
		return fmt.Errorf("page %d: %v", id, err)
	}
	return c.nodePage(buf, fmt.Sprintf("page %d", id), depth, 0)
}

// nodePage checks a branch or leaf page held in p (a whole page with its
// overflow, or an inline bucket's page), named where for errors.
func (c *treeChecker) nodePage(p []byte, where string, depth, inline int) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("%s: %d bytes, shorter than a page header", where, len(p))
	}
	flags := binary.LittleEndian.Uint16(p[8:])
	count := int(binary.LittleEndian.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > len(p) {
		return fmt.Errorf("%s: %d elements do not fit its %d bytes", where, count, len(p))
	}
	switch flags {
	case branchPageFlag:
		if inline > 0 {
			return fmt.Errorf("%s: an inline bucket's page is a branch", where)
		}
		return c.branch(p, where, count, depth)
	case leafPageFlag:
		return c.leaf(p, where, count, depth, inline)
	default:
		return fmt.Errorf("%s: flags %#x, want a branch or a leaf", where, flags)
	}
}

func (c *treeChecker) branch(p []byte, where string, count, depth int) error {
	if count == 0 {
		return fmt.Errorf("%s: a branch with no element", where)
	}
	for i := range count {
		e := pageHeaderSize + i*elementSize
		pos, ksize := int(binary.LittleEndian.Uint32(p[e:])), int(binary.LittleEndian.Uint32(p[e+4:]))
		if e+pos+ksize > len(p) || e+pos+ksize < e {
			return fmt.Errorf("%s: element %d's key beyond the page", where, i)
		}
		if err := c.page(binary.LittleEndian.Uint64(p[e+8:]), depth+1); err != nil {
			return fmt.Errorf("%s element %d: %w", where, i, err)
		}
	}
	return nil
}

func (c *treeChecker) leaf(p []byte, where string, count, depth, inline int) error {
	for i := range count {
		e := pageHeaderSize + i*elementSize
		flags := binary.LittleEndian.Uint32(p[e:])
		pos := int(binary.LittleEndian.Uint32(p[e+4:]))
		ksize := int(binary.LittleEndian.Uint32(p[e+8:]))
		vsize := int(binary.LittleEndian.Uint32(p[e+12:]))
		start := e + pos + ksize
		if pos < 0 || ksize < 0 || vsize < 0 || start < e || start+vsize > len(p) || start+vsize < start {
			return fmt.Errorf("%s: element %d's key or value beyond the page", where, i)
		}
		if flags&bucketLeafFlag == 0 {
			continue
		}
		v := p[start : start+vsize]
		if len(v) < bucketHeader {
			return fmt.Errorf("%s: element %d: a bucket of %d bytes, shorter than its header", where, i, len(v))
		}
		root := binary.LittleEndian.Uint64(v)
		var err error
		if root == 0 {
			if inline >= maxInlineNested {
				return fmt.Errorf("%s: inline buckets nested deeper than %d", where, maxInlineNested)
			}
			err = c.nodePage(v[bucketHeader:], fmt.Sprintf("%s element %d (inline bucket)", where, i), depth+1, inline+1)
		} else {
			err = c.page(root, depth+1)
			if err != nil {
				err = fmt.Errorf("%s element %d (bucket): %w", where, i, err)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
