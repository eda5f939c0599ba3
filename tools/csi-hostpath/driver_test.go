package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func newDriver(t *testing.T) *Driver {
	t.Helper()
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Driver{Name: "hostpath.test", NodeID: "node-1", Store: s}
}

var mountCap = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

func code(err error) codes.Code { return status.Code(err) }

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestASnapshotIsACopyAndAVolumeFromItACopyBack(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	req := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mountCap,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}}
	v, err := d.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if v.Volume.VolumeId != "pvc-1" || v.Volume.CapacityBytes != 5<<20 {
		t.Fatalf("volume %v", v.Volume)
	}
	// Again with the same name: the same volume (the provisioner retries).
	if _, err := d.CreateVolume(ctx, req); err != nil {
		t.Fatalf("idempotent create: %v", err)
	}
	// The same name, another size: refused.
	other := &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mountCap}
	if _, err := d.CreateVolume(ctx, other); code(err) != codes.AlreadyExists {
		t.Fatalf("conflicting create: %v", err)
	}
	dir := d.Store.VolumePath("pvc-1")
	write(t, filepath.Join(dir, "payload"), "before")
	write(t, filepath.Join(dir, "sub", "deep"), "deep")
	if err := os.Symlink("payload", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	snap, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: "pvc-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Snapshot.ReadyToUse || snap.Snapshot.SizeBytes != 5<<20 || snap.Snapshot.SourceVolumeId != "pvc-1" {
		t.Fatalf("snapshot %v", snap.Snapshot)
	}
	// The volume changes after the snapshot: the snapshot keeps what was.
	write(t, filepath.Join(dir, "payload"), "after")

	from := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-1"}}}
	small := &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: mountCap, VolumeContentSource: from,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}
	if _, err := d.CreateVolume(ctx, small); code(err) != codes.OutOfRange {
		t.Fatalf("a volume smaller than its snapshot: %v", err)
	}
	restored, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-3", VolumeCapabilities: mountCap,
		VolumeContentSource: from, CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Volume.ContentSource.GetSnapshot().GetSnapshotId() != "snapshot-1" {
		t.Fatalf("content source not echoed: %v", restored.Volume)
	}
	rdir := d.Store.VolumePath("pvc-3")
	if got := read(t, filepath.Join(rdir, "payload")); got != "before" {
		t.Fatalf("restored payload %q", got)
	}
	if got := read(t, filepath.Join(rdir, "sub", "deep")); got != "deep" {
		t.Fatalf("restored sub/deep %q", got)
	}
	if l, err := os.Readlink(filepath.Join(rdir, "link")); err != nil || l != "payload" {
		t.Fatalf("restored link %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(rdir, "payload")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("restored mode %v %v", fi.Mode(), err)
	}

	// From a snapshot that does not exist: NotFound.
	gone := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "snapshot-9"}}}
	if _, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-4", VolumeCapabilities: mountCap,
		VolumeContentSource: gone}); code(err) != codes.NotFound {
		t.Fatalf("from a missing snapshot: %v", err)
	}

	// Deleting is idempotent, and a deleted snapshot is listed no more.
	for i := 0; i < 2; i++ {
		if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snapshot-1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory left: %v", err)
	}
	l, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(l.Entries) != 0 {
		t.Fatalf("list after delete: %v %v", l, err)
	}
}

func TestNamesThatAreNoPathElementAreRefused(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	for _, name := range []string{"../x", "a/b", ".hidden", ""} {
		_, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: mountCap})
		if code(err) != codes.InvalidArgument {
			t.Errorf("CreateVolume %q: %v", name, err)
		}
		if name == "" {
			continue
		}
		if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: name}); code(err) != codes.InvalidArgument {
			t.Errorf("DeleteVolume %q: %v", name, err)
		}
		if _, err := d.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: name}); code(err) != codes.InvalidArgument {
			t.Errorf("DeleteSnapshot %q: %v", name, err)
		}
	}
	block := []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}
	if _, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "b", VolumeCapabilities: block}); code(err) != codes.InvalidArgument {
		t.Errorf("block volume: %v", err)
	}
}

func TestListSnapshotsFiltersAndPages(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	for _, v := range []string{"vol-a", "vol-b"} {
		if _, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: v, VolumeCapabilities: mountCap}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range [][2]string{{"s1", "vol-a"}, {"s2", "vol-a"}, {"s3", "vol-b"}} {
		if _, err := d.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: s[0], SourceVolumeId: s[1]}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(r *csi.ListSnapshotsResponse) (out []string) {
		for _, e := range r.Entries {
			out = append(out, e.Snapshot.SnapshotId)
		}
		return out
	}
	r, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: "s2"})
	if err != nil || len(r.Entries) != 1 || r.Entries[0].Snapshot.SourceVolumeId != "vol-a" ||
		r.Entries[0].Snapshot.CreationTime.AsTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("by ID: %v %v", r, err)
	}
	r, _ = d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: "nope"})
	if len(r.Entries) != 0 {
		t.Fatalf("unknown ID listed: %v", r)
	}
	r, _ = d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: "vol-a", MaxEntries: 1})
	if got := ids(r); len(got) != 1 || got[0] != "s1" || r.NextToken != "1" {
		t.Fatalf("first page: %v %q", got, r.NextToken)
	}
	r, _ = d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: "vol-a", MaxEntries: 1, StartingToken: "1"})
	if got := ids(r); len(got) != 1 || got[0] != "s2" || r.NextToken != "" {
		t.Fatalf("second page: %v %q", got, r.NextToken)
	}
	if _, err := d.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "x"}); code(err) != codes.Aborted {
		t.Fatalf("bad token: %v", err)
	}
}

func TestAHalfMadeVolumeIsMadeAgain(t *testing.T) {
	d := newDriver(t)
	// A crash after the copy, before the record: the directory is there, the record is not.
	write(t, filepath.Join(d.Store.VolumePath("pvc-x"), "stale"), "x")
	if _, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: mountCap}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Store.VolumePath("pvc-x"), "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-made volume's file is left: %v", err)
	}
}

// Bind mounts need root: the node's driver runs as root.
func TestPublishBindMountsTheVolumeAndUnpublishRemovesIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	d := newDriver(t)
	ctx := context.Background()
	if _, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-m", VolumeCapabilities: mountCap}); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d.Store.VolumePath("pvc-m"), "payload"), "data")
	target := filepath.Join(t.TempDir(), "pod", "mount")
	for _, ro := range []bool{false, true} {
		req := &csi.NodePublishVolumeRequest{VolumeId: "pvc-m", TargetPath: target, VolumeCapability: mountCap[0], Readonly: ro}
		for i := 0; i < 2; i++ { // the second publish finds it mounted
			if _, err := d.NodePublishVolume(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if got := read(t, filepath.Join(target, "payload")); got != "data" {
			t.Fatalf("through the mount: %q", got)
		}
		err := os.WriteFile(filepath.Join(target, "written"), []byte("w"), 0o644)
		if ro != (err != nil) {
			t.Fatalf("read-only %v, write: %v", ro, err)
		}
		for i := 0; i < 2; i++ {
			if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-m", TargetPath: target}); err != nil {
				t.Fatal(err)
			}
		}
		if m, _ := isMountPoint(target); m {
			t.Fatal("still mounted")
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("target left: %v", err)
		}
	}
	if _, err := d.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-none", TargetPath: target,
		VolumeCapability: mountCap[0]}); code(err) != codes.NotFound {
		t.Fatalf("publish of a missing volume: %v", err)
	}
}

func TestMountinfoEscapes(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
