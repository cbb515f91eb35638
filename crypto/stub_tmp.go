package crypto

// Temporary placeholders so the contract compiles; the framework helper
// replaces this file.
type requestState struct{}

// Framework is the provider registry and binder (placeholder).
type Framework struct{}
