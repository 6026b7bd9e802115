package digitalocean

import (
	"slices"
	"strings"
)

// size is a droplet size: a machine of Vcpus cores and Memory MiB.
type size struct {
	Slug         string   `json:"slug"`
	Memory       int      `json:"memory"` // MiB
	Vcpus        int      `json:"vcpus"`
	Disk         int      `json:"disk"` // GB
	Transfer     float64  `json:"transfer"`
	PriceMonthly float64  `json:"price_monthly"`
	PriceHourly  float64  `json:"price_hourly"`
	Regions      []string `json:"regions"`
	Available    bool     `json:"available"`
	Description  string   `json:"description"`
}

// regions are the regions droplets may be created in: those of
// inventories/providers.yaml.
var regions = []string{"ams3", "blr1", "fra1", "lon1", "nyc1", "nyc3", "sfo3", "sgp1", "syd1", "tor1"}

// sizes are the sizes the local cloud offers: those of
// inventories/providers.yaml, with its prices and transfer (TB), and the
// small ones our tests and DigitalOcean's examples use.
var sizes = []size{
	{Slug: "s-1vcpu-1gb", Memory: 1024, Vcpus: 1, Disk: 25, Transfer: 1, PriceMonthly: 6, PriceHourly: 0.00893, Description: "Basic"},
	{Slug: "s-1vcpu-2gb", Memory: 2048, Vcpus: 1, Disk: 50, Transfer: 2, PriceMonthly: 12, PriceHourly: 0.01786, Description: "Basic"},
	{Slug: "s-2vcpu-2gb", Memory: 2048, Vcpus: 2, Disk: 60, Transfer: 3, PriceMonthly: 18, PriceHourly: 0.02679, Description: "Basic"},
	{Slug: "s-2vcpu-4gb", Memory: 4096, Vcpus: 2, Disk: 80, Transfer: 4, PriceMonthly: 24, PriceHourly: 0.03571, Description: "Basic"},
	{Slug: "s-4vcpu-8gb", Memory: 8192, Vcpus: 4, Disk: 160, Transfer: 5, PriceMonthly: 48, PriceHourly: 0.07143, Description: "Basic"},
	{Slug: "s-8vcpu-16gb", Memory: 16384, Vcpus: 8, Disk: 320, Transfer: 6, PriceMonthly: 96, PriceHourly: 0.14286, Description: "Basic"},
	{Slug: "c-2", Memory: 4096, Vcpus: 2, Disk: 25, Transfer: 4, PriceMonthly: 42, PriceHourly: 0.0625, Description: "CPU-Optimized"},
	{Slug: "c-4", Memory: 8192, Vcpus: 4, Disk: 50, Transfer: 5, PriceMonthly: 84, PriceHourly: 0.125, Description: "CPU-Optimized"},
	{Slug: "c-8", Memory: 16384, Vcpus: 8, Disk: 100, Transfer: 6, PriceMonthly: 168, PriceHourly: 0.25, Description: "CPU-Optimized"},
	{Slug: "c-16", Memory: 32768, Vcpus: 16, Disk: 200, Transfer: 7, PriceMonthly: 336, PriceHourly: 0.5, Description: "CPU-Optimized"},
	{Slug: "c-32", Memory: 65536, Vcpus: 32, Disk: 400, Transfer: 9, PriceMonthly: 672, PriceHourly: 1.0, Description: "CPU-Optimized"},
}

func sizeList() []size {
	out := slices.Clone(sizes)
	for i := range out {
		out[i].Regions, out[i].Available = regions, true
	}
	return out
}

func sizeOf(slug string) (size, bool) {
	i := slices.IndexFunc(sizes, func(s size) bool { return s.Slug == slug })
	if i < 0 {
		return size{}, false
	}
	s := sizes[i]
	s.Regions, s.Available = regions, true
	return s, true
}

func sizeSlugs() string {
	var s []string
	for _, z := range sizes {
		s = append(s, z.Slug)
	}
	return strings.Join(s, ", ")
}
