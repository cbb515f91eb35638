package api

import "github.com/prometheus/client_golang/prometheus"

var (
	descConnsOpen = prometheus.NewDesc("keel_control_connections_open",
		"Control socket connections open now.", nil, nil)
	descConnsRefused = prometheus.NewDesc("keel_control_connections_refused_total",
		"Control socket connections refused over a limit (or without peer credentials).", nil, nil)
)

// collector exports a Server's ConnStats to Prometheus.
type collector struct{ s *Server }

// Collector returns a Prometheus collector for the server's connection
// counts, read on every scrape.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descConnsOpen
	ch <- descConnsRefused
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.ConnStats()
	ch <- prometheus.MustNewConstMetric(descConnsOpen, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descConnsRefused, prometheus.CounterValue, float64(st.Refused))
}
