package wire

import "strconv"

// PayloadType is a Next Payload value (RFC 7296 §3.2, IANA "IKEv2 Payload Types").
type PayloadType uint8

// Payload types.
const (
	PayloadNone    PayloadType = 0
	PayloadSA      PayloadType = 33
	PayloadKE      PayloadType = 34
	PayloadIDi     PayloadType = 35
	PayloadIDr     PayloadType = 36
	PayloadCERT    PayloadType = 37
	PayloadCERTREQ PayloadType = 38
	PayloadAUTH    PayloadType = 39
	PayloadNonce   PayloadType = 40
	PayloadN       PayloadType = 41
	PayloadD       PayloadType = 42
	PayloadV       PayloadType = 43
	PayloadTSi     PayloadType = 44
	PayloadTSr     PayloadType = 45
	PayloadSK      PayloadType = 46
	PayloadCP      PayloadType = 47
	PayloadEAP     PayloadType = 48
	PayloadSKF     PayloadType = 53
)

var payloadNames = map[PayloadType]string{
	PayloadNone: "NONE", PayloadSA: "SA", PayloadKE: "KE", PayloadIDi: "IDi", PayloadIDr: "IDr",
	PayloadCERT: "CERT", PayloadCERTREQ: "CERTREQ", PayloadAUTH: "AUTH", PayloadNonce: "No",
	PayloadN: "N", PayloadD: "D", PayloadV: "V", PayloadTSi: "TSi", PayloadTSr: "TSr",
	PayloadSK: "SK", PayloadCP: "CP", PayloadEAP: "EAP", PayloadSKF: "SKF",
}

// String returns the RFC 7296 notation of the payload type (SA, KE, No, ...).
func (t PayloadType) String() string {
	if s, ok := payloadNames[t]; ok {
		return s
	}
	return "PAYLOAD(" + strconv.Itoa(int(t)) + ")"
}

// ExchangeType is the IKE header's Exchange Type (§3.1).
type ExchangeType uint8

// Exchange types.
const (
	IKE_SA_INIT     ExchangeType = 34
	IKE_AUTH        ExchangeType = 35
	CREATE_CHILD_SA ExchangeType = 36
	INFORMATIONAL   ExchangeType = 37
)

// String returns the exchange's RFC name.
func (x ExchangeType) String() string {
	switch x {
	case IKE_SA_INIT:
		return "IKE_SA_INIT"
	case IKE_AUTH:
		return "IKE_AUTH"
	case CREATE_CHILD_SA:
		return "CREATE_CHILD_SA"
	case INFORMATIONAL:
		return "INFORMATIONAL"
	}
	return "EXCHANGE(" + strconv.Itoa(int(x)) + ")"
}

// Header flags (§3.1).
const (
	FlagInitiator uint8 = 0x08
	FlagVersion   uint8 = 0x10
	FlagResponse  uint8 = 0x20
)

// ProtocolID names the protocol of a proposal, notify or delete (§3.3.1).
type ProtocolID uint8

// Protocol IDs.
const (
	ProtoNone ProtocolID = 0
	ProtoIKE  ProtocolID = 1
	ProtoAH   ProtocolID = 2
	ProtoESP  ProtocolID = 3
)

// String returns IKE, AH, ESP or PROTO(n).
func (p ProtocolID) String() string {
	switch p {
	case ProtoNone:
		return "NONE"
	case ProtoIKE:
		return "IKE"
	case ProtoAH:
		return "AH"
	case ProtoESP:
		return "ESP"
	}
	return "PROTO(" + strconv.Itoa(int(p)) + ")"
}

// TransformType is a transform's type (§3.3.2).
type TransformType uint8

// Transform types.
const (
	TransformENCR  TransformType = 1
	TransformPRF   TransformType = 2
	TransformINTEG TransformType = 3
	TransformDH    TransformType = 4
	TransformESN   TransformType = 5
)

// String returns ENCR, PRF, INTEG, DH, ESN or TRANSFORM(n).
func (t TransformType) String() string {
	switch t {
	case TransformENCR:
		return "ENCR"
	case TransformPRF:
		return "PRF"
	case TransformINTEG:
		return "INTEG"
	case TransformDH:
		return "DH"
	case TransformESN:
		return "ESN"
	}
	return "TRANSFORM(" + strconv.Itoa(int(t)) + ")"
}

// Transform IDs this implementation negotiates (IANA "IKEv2 Transform
// Attribute Types" registries; RFC 7296 §3.3.2, RFC 5282, RFC 7634,
// RFC 4868, RFC 3526, RFC 5903, RFC 8031).
const (
	ENCR_AES_CBC           uint16 = 12
	ENCR_AES_GCM_8         uint16 = 18
	ENCR_AES_GCM_12        uint16 = 19
	ENCR_AES_GCM_16        uint16 = 20
	ENCR_CHACHA20_POLY1305 uint16 = 28

	PRF_HMAC_SHA2_256 uint16 = 5
	PRF_HMAC_SHA2_384 uint16 = 6
	PRF_HMAC_SHA2_512 uint16 = 7

	AUTH_NONE              uint16 = 0
	AUTH_HMAC_SHA2_256_128 uint16 = 12
	AUTH_HMAC_SHA2_384_192 uint16 = 13
	AUTH_HMAC_SHA2_512_256 uint16 = 14

	DH_NONE     uint16 = 0
	DH_MODP2048 uint16 = 14
	DH_ECP256   uint16 = 19
	DH_X25519   uint16 = 31

	ESN_NO  uint16 = 0
	ESN_YES uint16 = 1
)

// AttrKeyLength is the Key Length transform attribute (§3.3.5), always TV.
const AttrKeyLength uint16 = 14

// NotifyType is a Notify Message Type (§3.10.1); below 16384 an error.
type NotifyType uint16

// Notify message types.
const (
	UNSUPPORTED_CRITICAL_PAYLOAD  NotifyType = 1
	INVALID_IKE_SPI               NotifyType = 4
	INVALID_MAJOR_VERSION         NotifyType = 5
	INVALID_SYNTAX                NotifyType = 7
	INVALID_MESSAGE_ID            NotifyType = 9
	INVALID_SPI                   NotifyType = 11
	NO_PROPOSAL_CHOSEN            NotifyType = 14
	INVALID_KE_PAYLOAD            NotifyType = 17
	AUTHENTICATION_FAILED         NotifyType = 24
	SINGLE_PAIR_REQUIRED          NotifyType = 34
	NO_ADDITIONAL_SAS             NotifyType = 35
	INTERNAL_ADDRESS_FAILURE      NotifyType = 36
	FAILED_CP_REQUIRED            NotifyType = 37
	TS_UNACCEPTABLE               NotifyType = 38
	INVALID_SELECTORS             NotifyType = 39
	TEMPORARY_FAILURE             NotifyType = 43
	CHILD_SA_NOT_FOUND            NotifyType = 44
	INITIAL_CONTACT               NotifyType = 16384
	SET_WINDOW_SIZE               NotifyType = 16385
	ADDITIONAL_TS_POSSIBLE        NotifyType = 16386
	IPCOMP_SUPPORTED              NotifyType = 16387
	NAT_DETECTION_SOURCE_IP       NotifyType = 16388
	NAT_DETECTION_DESTINATION_IP  NotifyType = 16389
	COOKIE                        NotifyType = 16390
	USE_TRANSPORT_MODE            NotifyType = 16391
	REKEY_SA                      NotifyType = 16393
	ESP_TFC_PADDING_NOT_SUPPORTED NotifyType = 16394
	NON_FIRST_FRAGMENTS_ALSO      NotifyType = 16395
	MOBIKE_SUPPORTED              NotifyType = 16396
	FRAGMENTATION_SUPPORTED       NotifyType = 16430
	SIGNATURE_HASH_ALGORITHMS     NotifyType = 16431
)

var notifyNames = map[NotifyType]string{
	UNSUPPORTED_CRITICAL_PAYLOAD: "UNSUPPORTED_CRITICAL_PAYLOAD", INVALID_IKE_SPI: "INVALID_IKE_SPI",
	INVALID_MAJOR_VERSION: "INVALID_MAJOR_VERSION", INVALID_SYNTAX: "INVALID_SYNTAX",
	INVALID_MESSAGE_ID: "INVALID_MESSAGE_ID", INVALID_SPI: "INVALID_SPI",
	NO_PROPOSAL_CHOSEN: "NO_PROPOSAL_CHOSEN", INVALID_KE_PAYLOAD: "INVALID_KE_PAYLOAD",
	AUTHENTICATION_FAILED: "AUTHENTICATION_FAILED", SINGLE_PAIR_REQUIRED: "SINGLE_PAIR_REQUIRED",
	NO_ADDITIONAL_SAS: "NO_ADDITIONAL_SAS", INTERNAL_ADDRESS_FAILURE: "INTERNAL_ADDRESS_FAILURE",
	FAILED_CP_REQUIRED: "FAILED_CP_REQUIRED", TS_UNACCEPTABLE: "TS_UNACCEPTABLE",
	INVALID_SELECTORS: "INVALID_SELECTORS", TEMPORARY_FAILURE: "TEMPORARY_FAILURE",
	CHILD_SA_NOT_FOUND: "CHILD_SA_NOT_FOUND", INITIAL_CONTACT: "INITIAL_CONTACT",
	SET_WINDOW_SIZE: "SET_WINDOW_SIZE", ADDITIONAL_TS_POSSIBLE: "ADDITIONAL_TS_POSSIBLE",
	IPCOMP_SUPPORTED: "IPCOMP_SUPPORTED", NAT_DETECTION_SOURCE_IP: "NAT_DETECTION_SOURCE_IP",
	NAT_DETECTION_DESTINATION_IP: "NAT_DETECTION_DESTINATION_IP", COOKIE: "COOKIE",
	USE_TRANSPORT_MODE: "USE_TRANSPORT_MODE", REKEY_SA: "REKEY_SA",
	ESP_TFC_PADDING_NOT_SUPPORTED: "ESP_TFC_PADDING_NOT_SUPPORTED",
	NON_FIRST_FRAGMENTS_ALSO:      "NON_FIRST_FRAGMENTS_ALSO", MOBIKE_SUPPORTED: "MOBIKE_SUPPORTED",
	FRAGMENTATION_SUPPORTED: "FRAGMENTATION_SUPPORTED", SIGNATURE_HASH_ALGORITHMS: "SIGNATURE_HASH_ALGORITHMS",
}

// String returns the notify type's RFC name, or N(n).
func (n NotifyType) String() string {
	if s, ok := notifyNames[n]; ok {
		return s
	}
	return "N(" + strconv.Itoa(int(n)) + ")"
}

// IsError reports whether n is an error notification (below 16384).
func (n NotifyType) IsError() bool { return n < 16384 }

// IDType is the ID Type of an IDi/IDr payload (§3.5).
type IDType uint8

// Identification types.
const (
	ID_IPV4_ADDR   IDType = 1
	ID_FQDN        IDType = 2
	ID_RFC822_ADDR IDType = 3
	ID_IPV6_ADDR   IDType = 5
	ID_DER_ASN1_DN IDType = 9
	ID_DER_ASN1_GN IDType = 10
	ID_KEY_ID      IDType = 11
)

// AuthMethod is the AUTH payload's method (§3.8, RFC 7427).
type AuthMethod uint8

// Authentication methods.
const (
	AuthRSASig           AuthMethod = 1
	AuthSharedKey        AuthMethod = 2
	AuthDSSSig           AuthMethod = 3
	AuthECDSA256         AuthMethod = 9
	AuthECDSA384         AuthMethod = 10
	AuthECDSA521         AuthMethod = 11
	AuthDigitalSignature AuthMethod = 14
)

// TSType is a traffic selector's type (§3.13.1).
type TSType uint8

// Traffic selector types.
const (
	TS_IPV4_ADDR_RANGE TSType = 7
	TS_IPV6_ADDR_RANGE TSType = 8
)
