package services

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descState = prometheus.NewDesc("keel_service_state", "1 for the service's current state (label state).",
		[]string{"service", "type", "state"}, nil)
	descRestarts = prometheus.NewDesc("keel_service_restarts_total", "Restarts of the service by its supervisor.",
		[]string{"service"}, nil)
	descStartSecs = prometheus.NewDesc("keel_service_start_seconds", "How long the service's last start took.",
		[]string{"service"}, nil)
	descBoot     = prometheus.NewDesc("keel_boot_duration_seconds", "Time from boot start until every service was done.", nil, nil)
	descDegraded = prometheus.NewDesc("keel_service_degraded", "1 while the service runs degraded (see its status), else 0.",
		[]string{"service"}, nil)
)

// collector exports a Manager's service states to Prometheus.
type collector struct{ m *Manager }

// NewCollector returns a Prometheus collector for m's services: state,
// restarts, start duration and boot duration. It reads m on every scrape.
func NewCollector(m *Manager) prometheus.Collector { return collector{m} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descState
	ch <- descRestarts
	ch <- descStartSecs
	ch <- descBoot
	ch <- descDegraded
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.m.Status() {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, 1, s.Name, string(s.Type), string(s.State))
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(s.Restarts), s.Name)
		ch <- prometheus.MustNewConstMetric(descStartSecs, prometheus.GaugeValue, s.Duration.Seconds(), s.Name)
		degraded := 0.0
		if s.Degraded != "" {
			degraded = 1
		}
		ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, degraded, s.Name)
	}
	if tl := c.m.Timeline(); tl.Finished > 0 {
		ch <- prometheus.MustNewConstMetric(descBoot, prometheus.GaugeValue, tl.Finished.Seconds())
	}
}
