package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// defaultCapacity: a volume's size when the claim names none (the sizes are records: nothing enforces them).
const defaultCapacity = 1 << 30

// Driver serves CSI's Identity, Controller and Node services over a Store.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	Name, NodeID string
	Store        *Store
	// mounts serialises the node's mount and unmount calls (the kubelet may retry one while it runs).
	mounts sync.Mutex
}

// storeError maps a Store's errors to CSI's codes.
func storeError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrConflict):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrTooSmall):
		return status.Error(codes.OutOfRange, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// --- Identity -----------------------------------------------------------------------------------------------

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.Name, VendorVersion: version}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// --- Controller ---------------------------------------------------------------------------------------------

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapabilities: file systems only (a volume is a directory), any access mode (one node).
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, c := range caps {
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "only file-system volumes (access type mount) are served")
		}
	}
	return nil
}

func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "no name")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	if capacity == 0 {
		capacity = req.GetCapacityRange().GetLimitBytes()
	}
	if capacity == 0 {
		capacity = defaultCapacity
	}
	from := ""
	if src := req.GetVolumeContentSource(); src != nil {
		if src.GetSnapshot() == nil {
			return nil, status.Error(codes.InvalidArgument, "volumes are made empty or from a snapshot, not cloned")
		}
		from = src.GetSnapshot().GetSnapshotId()
	}
	v, err := d.Store.CreateVolume(req.GetName(), capacity, from)
	if err != nil {
		return nil, storeError(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      v.Name,
		CapacityBytes: v.CapacityBytes,
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := d.Store.DeleteVolume(req.GetVolumeId()); err != nil {
		return nil, storeError(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := d.Store.GetVolume(req.GetVolumeId()); err != nil {
		return nil, storeError(err)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}

func csiSnapshot(id string, s Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     id,
		SourceVolumeId: s.SourceVolumeID,
		SizeBytes:      s.SizeBytes,
		CreationTime:   timestamppb.New(s.CreationTime),
		// Copied before CreateSnapshot returns: ready at once.
		ReadyToUse: true,
	}
}

func (d *Driver) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" || req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "a snapshot needs a name and a source volume")
	}
	s, err := d.Store.CreateSnapshot(req.GetName(), req.GetSourceVolumeId())
	if err != nil {
		return nil, storeError(err)
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(s.Name, s)}, nil
}

func (d *Driver) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if err := d.Store.DeleteSnapshot(req.GetSnapshotId()); err != nil {
		return nil, storeError(err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots: the csi-snapshotter reads a snapshot's state by it (of one it did not make: Velero's data mover
// names an existing snapshot in a VolumeSnapshotContent of its own).
func (d *Driver) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	all, err := d.Store.ListSnapshots()
	if err != nil {
		return nil, storeError(err)
	}
	var entries []*csi.ListSnapshotsResponse_Entry
	for _, s := range all {
		if id := req.GetSnapshotId(); id != "" && s.Name != id {
			continue
		}
		if v := req.GetSourceVolumeId(); v != "" && s.SourceVolumeID != v {
			continue
		}
		entries = append(entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(s.Name, s)})
	}
	start := 0
	if t := req.GetStartingToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(entries) {
			return nil, status.Errorf(codes.Aborted, "invalid starting token %q", t)
		}
		start = n
	}
	entries = entries[start:]
	next := ""
	if m := int(req.GetMaxEntries()); m > 0 && m < len(entries) {
		entries = entries[:m]
		next = strconv.Itoa(start + m)
	}
	return &csi.ListSnapshotsResponse{Entries: entries, NextToken: next}, nil
}

// --- Node ---------------------------------------------------------------------------------------------------

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.NodeID}, nil
}

// NodeGetCapabilities: none; without STAGE_UNSTAGE_VOLUME the kubelet publishes each pod's volume directly.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume bind-mounts the volume's directory at the pod's target path (read-only if asked).
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || !filepath.IsAbs(target) {
		return nil, status.Error(codes.InvalidArgument, "no absolute target path")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	id := req.GetVolumeId()
	if _, err := d.Store.GetVolume(id); err != nil {
		return nil, storeError(err)
	}
	d.mounts.Lock()
	defer d.mounts.Unlock()
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(d.Store.VolumePath(id), target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount at %s: %v", target, err)
	}
	if req.GetReadonly() {
		// A bind mount takes its own read-only flag only on a remount.
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target path and removes it.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if target == "" || !filepath.IsAbs(target) {
		return nil, status.Error(codes.InvalidArgument, "no absolute target path")
	}
	d.mounts.Lock()
	defer d.mounts.Unlock()
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// isMountPoint: whether path is a mount point of this process's mount namespace (/proc/self/mountinfo; a bind
// mount of a directory of the same file system shows no other device, so stat cannot tell).
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := filepath.Clean(path)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == want {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading /proc/self/mountinfo: %w", err)
	}
	return false, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
