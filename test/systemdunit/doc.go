// Package systemdunit computes the command line and environment systemd
// would start a service with, from the unit files under a root directory:
// the unit found first on systemd's search path, its drop-ins in name
// order, Environment= and EnvironmentFile= (files override assignments, a
// '-' makes a file optional), and ExecStart= with an empty assignment
// resetting it and $VAR / ${VAR} expanded as systemd expands them.
//
// It is how critlet's packages are checked: installed into a scratch root
// beside kubeadm's drop-in, the kubelet is started exactly as systemd would
// start it. Unit parsing is go-systemd's; what this package adds is the
// service manager's semantics on top. Unsupported constructs (specifiers
// other than %%, more than one ExecStart= for a simple service) are errors,
// never guesses.
package systemdunit
