// Command csi-hostpath is the local node's CSI driver, for tests and the walkthrough: volumes are directories
// on the node, a snapshot is a copy of a volume's directory, and a volume made from a snapshot is a copy back.
// It serves CSI's Identity, Controller and Node services on one unix socket (the external provisioner and
// csi-snapshotter talk to it beside the kubelet) and registers itself with the kubelet through the plugin
// registration socket, so no node-driver-registrar is needed. One node, one driver process: every access mode is
// served, since every pod of the cluster runs on this node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// version is what GetPluginInfo reports; the driver is the project's own.
const version = "v1.0.0"

func main() {
	name := flag.String("driver-name", "hostpath.csi.nac.local", "the CSI driver's name (StorageClass provisioner, VolumeSnapshotClass driver)")
	endpoint := flag.String("endpoint", "", "unix socket to serve CSI on")
	regDir := flag.String("registration-dir", "", "the kubelet's plugin registration directory (<kubelet root>/plugins_registry); empty: no registration")
	stateDir := flag.String("state-dir", "", "directory of the volumes and snapshots")
	nodeID := flag.String("node-id", "", "this node's name, as NodeGetInfo reports it")
	flag.Parse()
	if *endpoint == "" || *stateDir == "" || *nodeID == "" {
		fmt.Fprintln(os.Stderr, "csi-hostpath: --endpoint, --state-dir and --node-id are required")
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*name, *endpoint, *regDir, *stateDir, *nodeID); err != nil {
		log.Fatalf("csi-hostpath: %v", err)
	}
}

// listen: a unix socket at path, a stale one from an earlier run removed first.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

func run(name, endpoint, regDir, stateDir, nodeID string) error {
	store, err := NewStore(stateDir)
	if err != nil {
		return err
	}
	d := &Driver{Name: name, NodeID: nodeID, Store: store}
	l, err := listen(endpoint)
	if err != nil {
		return fmt.Errorf("CSI socket %s: %w", endpoint, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	failed := make(chan error, 2)
	go func() { failed <- srv.Serve(l) }()
	log.Printf("driver %s %s serving CSI on %s, state in %s", name, version, endpoint, stateDir)

	var reg *grpc.Server
	if regDir != "" {
		sock := filepath.Join(regDir, name+"-reg.sock")
		rl, err := listen(sock)
		if err != nil {
			return fmt.Errorf("registration socket %s: %w", sock, err)
		}
		reg = grpc.NewServer()
		registration.RegisterRegistrationServer(reg, &registrar{name: name, endpoint: endpoint, failed: failed})
		go func() { failed <- reg.Serve(rl) }()
		log.Printf("registration socket %s (the kubelet's plugin watcher finds it there)", sock)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-stop:
		log.Printf("%v: stopping", s)
		err = nil
	case err = <-failed:
	}
	if reg != nil {
		reg.Stop()
		// Gone with the process: the kubelet deregisters the driver when its socket disappears.
		_ = os.Remove(filepath.Join(regDir, name+"-reg.sock"))
	}
	srv.GracefulStop()
	_ = os.Remove(endpoint)
	return err
}

// logCalls logs each call and its outcome: the driver's log is how a test failure is read.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		log.Printf("%s %v: error: %v", info.FullMethod, req, err)
	} else if info.FullMethod != csi.Identity_Probe_FullMethodName {
		log.Printf("%s %v: ok", info.FullMethod, req)
	}
	return resp, err
}

// registrar answers the kubelet's plugin watcher: the driver's name and the socket of its CSI services.
type registrar struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
	failed         chan<- error
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		// Exit, as node-driver-registrar does: a driver the kubelet refused mounts nothing.
		r.failed <- fmt.Errorf("the kubelet refused the registration: %s", s.Error)
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registration.RegistrationStatusResponse{}, nil
}
