package wire

import "fmt"

// Error is a decoding failure. Offset is the byte offset in the message (or
// payload chain) where the fault was found; Notify is the notification a
// responder answers with (INVALID_SYNTAX, UNSUPPORTED_CRITICAL_PAYLOAD with
// the payload type in Data, or INVALID_MAJOR_VERSION).
type Error struct {
	Offset  int
	Payload PayloadType // the payload being parsed, PayloadNone for the header
	Notify  NotifyType
	Data    []byte // the Notification Data a responder sends back, if any
	Reason  string
}

// Error returns "ike: offset N: payload: reason".
func (e *Error) Error() string {
	if e.Payload == PayloadNone {
		return fmt.Sprintf("ike: offset %d: header: %s", e.Offset, e.Reason)
	}
	return fmt.Sprintf("ike: offset %d: %s payload: %s", e.Offset, e.Payload, e.Reason)
}

func syntaxErr(off int, p PayloadType, format string, args ...any) *Error {
	return &Error{Offset: off, Payload: p, Notify: INVALID_SYNTAX, Reason: fmt.Sprintf(format, args...)}
}
