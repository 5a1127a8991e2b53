// Package atomicfile replaces files so that a crash or power loss leaves either the old contents
// or the new ones, never a torn file: the data goes to a temporary file in the same directory,
// which is fsynced, renamed over the target, and the directory is fsynced so the rename itself
// is durable. The example trainer and the data generator share it.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFile replaces path by data with permissions perm, exactly (no umask: the
// temporary file is chmod-ed explicitly, since os.CreateTemp makes it 0600).
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that entries created, renamed or removed in it survive a crash.
// Filesystems and platforms that cannot sync a directory (os.ErrInvalid, e.g. Windows) are
// accepted silently: there the rename is as durable as the platform makes it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
