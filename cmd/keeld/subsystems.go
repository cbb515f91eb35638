package main

import (
	"log/slog"

	"github.com/keelinit/keel/services/builtin"

	// Crypto provider modules, registered with the modules package at
	// init and loaded by kld_list / cryptodev_modules.
	_ "github.com/keelinit/keel/crypto/providers"
)

// subsystems is the set of Go builtins (kld, cryptodev, ipsec, pktgen).
type subsystems = builtin.System

func newSubsystems(s settings, log *slog.Logger) *subsystems {
	return builtin.New(builtin.Options{CalibrationBudget: s.CalibrationBudget, Logger: log})
}
