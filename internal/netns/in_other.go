//go:build !linux

package netns

import "errors"

// in needs Linux network namespaces.
func (l *Lab) in(i int, f func() error) error {
	return errors.New("netns: network namespaces need Linux")
}
