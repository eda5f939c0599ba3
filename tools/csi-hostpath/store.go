package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"time"
)

// Store keeps volumes and snapshots as directories under one state directory:
//
//	volumes/<id>/        a volume's files (what pods mount)
//	volumes/<id>.json    its record (name, capacity, where it came from)
//	snapshots/<id>/      a copy of a volume's files
//	snapshots/<id>.json  its record
//
// A record is written last, after its directory is complete (copied under a temporary name and renamed): a
// directory without one is what a crash left half made, and the next create of that name starts over.
type Store struct {
	dir string
	mu  sync.Mutex
}

// Volume is a volume's record.
type Volume struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
	// FromSnapshot: the snapshot it was copied from, if any.
	FromSnapshot string `json:"fromSnapshot,omitempty"`
}

// Snapshot is a snapshot's record.
type Snapshot struct {
	Name           string    `json:"name"`
	SourceVolumeID string    `json:"sourceVolumeId"`
	SizeBytes      int64     `json:"sizeBytes"`
	CreationTime   time.Time `json:"creationTime"`
}

// ErrNotFound: no volume or snapshot of that ID.
var ErrNotFound = errors.New("not found")

// ErrConflict: the name exists already with other parameters.
var ErrConflict = errors.New("exists with other parameters")

// ErrInvalid: a name or ID that cannot be one.
var ErrInvalid = errors.New("invalid ID")

// ErrTooSmall: a volume asked smaller than the snapshot it is made from.
var ErrTooSmall = errors.New("capacity below the snapshot's size")

// IDs are names made by the sidecars (pvc-<uid>, snapshot-<uid>) and become path elements here: nothing else.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckID refuses what is not a plain path element.
func CheckID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("%w %q (letters, digits, '.', '_', '-'; at most 128)", ErrInvalid, id)
	}
	return nil
}

// NewStore opens (makes) the state directory.
func NewStore(dir string) (*Store, error) {
	for _, d := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			return nil, err
		}
	}
	return &Store{dir: dir}, nil
}

// VolumePath is the directory a volume's pods mount.
func (s *Store) VolumePath(id string) string { return filepath.Join(s.dir, "volumes", id) }

func (s *Store) snapshotPath(id string) string { return filepath.Join(s.dir, "snapshots", id) }

func readRecord(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ErrNotFound
	} else if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeRecord(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// GetVolume reads a volume's record.
func (s *Store) GetVolume(id string) (Volume, error) {
	var v Volume
	if err := CheckID(id); err != nil {
		return v, err
	}
	err := readRecord(s.VolumePath(id)+".json", &v)
	return v, err
}

// GetSnapshot reads a snapshot's record.
func (s *Store) GetSnapshot(id string) (Snapshot, error) {
	var v Snapshot
	if err := CheckID(id); err != nil {
		return v, err
	}
	err := readRecord(s.snapshotPath(id)+".json", &v)
	return v, err
}

// CreateVolume makes volume `name` (its ID), empty or a copy of snapshot `from`; again with the same name and
// parameters it returns the volume made before.
func (s *Store) CreateVolume(name string, capacity int64, from string) (Volume, error) {
	if err := CheckID(name); err != nil {
		return Volume{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, err := s.GetVolume(name); err == nil {
		if v.CapacityBytes != capacity || v.FromSnapshot != from {
			return Volume{}, fmt.Errorf("volume %s: %w", name, ErrConflict)
		}
		return v, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Volume{}, err
	}
	dst := s.VolumePath(name)
	tmp := filepath.Join(s.dir, "volumes", ".new-"+name)
	for _, d := range []string{dst, tmp} {
		if err := os.RemoveAll(d); err != nil {
			return Volume{}, err
		}
	}
	if from == "" {
		if err := os.Mkdir(tmp, 0o777); err != nil {
			return Volume{}, err
		}
		// The mode asked for, not the umask's: pods of any user write to a new volume.
		if err := os.Chmod(tmp, 0o777); err != nil {
			return Volume{}, err
		}
	} else {
		snap, err := s.GetSnapshot(from)
		if err != nil {
			return Volume{}, fmt.Errorf("snapshot %s: %w", from, err)
		}
		if capacity < snap.SizeBytes {
			return Volume{}, fmt.Errorf("%w: %d bytes asked, snapshot %s holds %d", ErrTooSmall, capacity, from, snap.SizeBytes)
		}
		if err := CopyTree(s.snapshotPath(from), tmp); err != nil {
			return Volume{}, fmt.Errorf("copying snapshot %s: %w", from, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return Volume{}, err
	}
	v := Volume{Name: name, CapacityBytes: capacity, FromSnapshot: from}
	return v, writeRecord(dst+".json", v)
}

// DeleteVolume removes a volume; one that does not exist is deleted already.
func (s *Store) DeleteVolume(id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The record first: a crash in between leaves a directory without one, which the next create replaces.
	if err := os.Remove(s.VolumePath(id) + ".json"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(s.VolumePath(id))
}

// CreateSnapshot copies volume `source` as snapshot `name`; again with the same name and source it returns the
// snapshot made before. Its size is the volume's capacity, which a volume made from it needs at least.
func (s *Store) CreateSnapshot(name, source string) (Snapshot, error) {
	if err := CheckID(name); err != nil {
		return Snapshot{}, err
	}
	if err := CheckID(source); err != nil {
		return Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap, err := s.GetSnapshot(name); err == nil {
		if snap.SourceVolumeID != source {
			return Snapshot{}, fmt.Errorf("snapshot %s of volume %s: %w", name, snap.SourceVolumeID, ErrConflict)
		}
		return snap, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Snapshot{}, err
	}
	vol, err := s.GetVolume(source)
	if err != nil {
		return Snapshot{}, fmt.Errorf("volume %s: %w", source, err)
	}
	dst := s.snapshotPath(name)
	tmp := filepath.Join(s.dir, "snapshots", ".new-"+name)
	for _, d := range []string{dst, tmp} {
		if err := os.RemoveAll(d); err != nil {
			return Snapshot{}, err
		}
	}
	if err := CopyTree(s.VolumePath(source), tmp); err != nil {
		return Snapshot{}, fmt.Errorf("copying volume %s: %w", source, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Name: name, SourceVolumeID: source, SizeBytes: vol.CapacityBytes, CreationTime: time.Now().UTC()}
	return snap, writeRecord(dst+".json", snap)
}

// DeleteSnapshot removes a snapshot; one that does not exist is deleted already.
func (s *Store) DeleteSnapshot(id string) error {
	if err := CheckID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Remove(s.snapshotPath(id) + ".json"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(s.snapshotPath(id))
}

// ListSnapshots returns the snapshots, by ID.
func (s *Store) ListSnapshots() ([]Snapshot, error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "snapshots", "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := make([]Snapshot, 0, len(paths))
	for _, p := range paths {
		var snap Snapshot
		if err := readRecord(p, &snap); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// CopyTree copies directory src to dst (which must not exist): directories, regular files and symbolic links,
// with their modes, owners and modification times. Hard links become separate files; sockets are left out (they
// mean nothing without their process); devices and FIFOs are refused. Files are copied as they are at the moment
// each is read: a snapshot of a volume in use is as consistent as the application keeps its files.
func CopyTree(src, dst string) error {
	type dirTime struct {
		path  string
		mtime time.Time
	}
	var dirs []dirTime
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{target, info.ModTime()})
		case mode.IsRegular():
			if err := copyFile(path, target); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case mode&fs.ModeSocket != 0:
			return nil
		default:
			return fmt.Errorf("%s: cannot copy a file of mode %v", path, mode)
		}
		return keepAttributes(target, info)
	})
	if err != nil {
		return err
	}
	// Directories' times last, deepest first: creating their entries changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i].path, dirs[i].mtime, dirs[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// keepAttributes gives target the owner, mode and modification time of info (a symbolic link: its owner).
func keepAttributes(target string, info fs.FileInfo) error {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		// Only root may give files away; as anyone else the copy is the copier's.
		if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if err := os.Chmod(target, info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	if info.Mode().IsRegular() {
		return os.Chtimes(target, info.ModTime(), info.ModTime())
	}
	return nil
}
