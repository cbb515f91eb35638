package services

// rc.d service files
//
// A declarative rc.d file holds rcorder headers and plain shell
// assignments only (evaluated like rc.conf, with the service's rc.conf view
// in scope, so command_args="${foo_socket}" works). Variables:
//
//	name             service name (default: the file name)
//	rcvar            rc.conf variable that enables it (checkyesno); empty: always on
//	type             oneshot | daemon | builtin (default daemon)
//	command          program to run (host path); optional for a oneshot milestone
//	command_args     arguments, split with shell quoting, never expanded again
//	${name}_flags    from rc.conf, placed before command_args (rc.subr)
//	pidfile          daemon readiness: ready once it names a live process
//	notify           yes: daemon readiness is READY=1 over sd_notify
//	required_modules modules loaded (through the modules package) before start
//	required_files   files that must exist, relative to the root
//	start_precmd     argv run to completion before start (not shell)
//	stop_postcmd     argv run after stop (not shell)
//	stop_signal      signal sent to the process group (default TERM)
//	start_timeout    seconds or a Go duration (default 30s), covering
//	                 required files, modules, start_precmd and readiness;
//	                 a daemon may extend it with EXTEND_TIMEOUT_USEC
//	stop_timeout     before SIGKILL (default 10s); keeld's shutdown
//	                 deadline cuts it short
//	restart          no | on-failure | always (daemons; default no)
//	restart_backoff  first restart delay, doubled per consecutive crash
//	                 up to 30s; MaxRestartFailures crashes in a row give up
//	requisite        provisions, each also in the REQUIRE header, that are
//	                 hard requirements (systemd Requisite= plus BindsTo='s
//	                 stop): see below
//
// Ordering and requirement are separate, as in FreeBSD rc and systemd.
// REQUIRE and BEFORE only order: a service starts once what it requires
// has finished starting, whether that succeeded or failed (status then
// says "started after failed X"), and stopping X leaves it running. A
// provision listed in requisite forbids as well: the service is blocked
// when a provider of it failed or was blocked, and stops when that
// provider stops. A builtin that requires a service is always stopped
// and restarted with it, since it holds in-process references to it. The
// default appliance uses requisite only where a failure cannot cut off
// management access (ipsec on cryptodev, pktgen on ipsec): a typo in
// ipsec.conf must not keep sshd or syslogd from starting.
//
// An executable file whose body is not only assignments is a legacy
// script, run as /bin/sh FILE start|stop|reload; name= and rcvar= are read
// from its literal top-level assignments.
//
// Effective settings (Definition.Settings) are the declarative variables,
// the rcvar's value, every ${name}_* rc.conf variable and what a builtin's
// Settings adds; Manager.Reload restarts a service when they change.
//
// Supervision watches a daemon's main process itself, not its output: a
// descendant that keeps stdout open (a "setsid helper &") delays neither
// the detection of the main process's exit nor a stop, and its output
// still reaches the service's log lines while it holds the pipe. Such a
// descendant, having left the process group, is not signalled by stop;
// when it is orphaned, keeld reaps it (see package childproc).
//
// Check (keeld -n, keelctl check) validates a configuration without
// starting, creating or locking anything, and reports each problem as a
// Finding, "file:line: ...": the rc.conf chain, every rc.d file, the
// ordering (rcorder's errors and warnings), unknown rc.conf variables,
// and, through the Checker interface, the files and variables that each
// enabled builtin reads itself (ipsec_file, kld_list...). Boot logs the
// same notices in the same words. Manager.Reload runs the same checks on
// what changed before it touches anything, and applies all or nothing:
// an invalid change is refused with every error, and a failure that only
// applying shows rolls back what the reload had changed (Undoer for a
// builtin that reloaded in place).
