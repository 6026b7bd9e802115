package hcloud

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/relayfleet/relayfleet/inventories"
)

// serverType is one Hetzner server type the local cloud sells: the
// catalogue's (inventories/providers.yaml) name, cores, RAM, locations
// and prices.
type serverType struct {
	ID        int64
	Name      string
	Cores     int
	RAM       int64 // bytes
	Shared    bool
	Locations []string
	Prices    map[string]typePrice // by location: the catalogue's row for its region
}

type typePrice struct {
	Hourly, Monthly, PerTB float64
	Included               int64 // bytes of traffic a month
}

// location is one Hetzner location.
type location struct {
	ID                                int64
	Name, Description, Country, City  string
	Lat, Long                         float64
	NetworkZone                       string
	DatacenterID                      int64
	DatacenterName, DatacenterDescrip string
}

// knownLocations are Hetzner's locations as the API describes them.
var knownLocations = []location{
	{1, "fsn1", "Falkenstein DC Park 1", "DE", "Falkenstein", 50.47612, 12.370071, "eu-central", 4, "fsn1-dc14", "Falkenstein 1 virtual DC 14"},
	{2, "nbg1", "Nuremberg DC Park 1", "DE", "Nuremberg", 49.452102, 11.076665, "eu-central", 2, "nbg1-dc3", "Nuremberg 1 virtual DC 3"},
	{3, "hel1", "Helsinki DC Park 1", "FI", "Helsinki", 60.169855, 24.938379, "eu-central", 3, "hel1-dc2", "Helsinki 1 virtual DC 2"},
	{4, "ash", "Ashburn, VA", "US", "Ashburn, VA", 39.045821, -77.487073, "us-east", 5, "ash-dc1", "Ashburn virtual DC 1"},
	{5, "hil", "Hillsboro, OR", "US", "Hillsboro, OR", 45.54222, -122.951924, "us-west", 6, "hil-dc1", "Hillsboro virtual DC 1"},
	{6, "sin", "Singapore", "SG", "Singapore", 1.283333, 103.833333, "ap-southeast", 7, "sin-dc1", "Singapore virtual DC 1"},
}

// image is the one image the local cloud boots: the lab's Debian 12.
type image struct {
	ID                  int64
	Name, Description   string
	OSFlavor, OSVersion string
	DiskSize            float64
	Created             string
}

var images = []image{{ID: 114690387, Name: "debian-12", Description: "Debian 12", OSFlavor: "debian", OSVersion: "12", DiskSize: 5, Created: "2023-06-13T06:00:02Z"}}

// catalog reads the hcloud server types from the shipped provider
// catalogue.
func catalog() ([]serverType, error) {
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	p, ok := cat.Provider("hcloud")
	if !ok {
		return nil, fmt.Errorf("provider catalogue: no hcloud provider")
	}
	var types []serverType
	for _, s := range p.Shapes {
		locs := p.Regions[s.Region]
		i := slices.IndexFunc(types, func(t serverType) bool { return t.Name == s.Name })
		if i < 0 {
			types = append(types, serverType{
				ID: int64(len(types) + 1), Name: s.Name, Cores: s.Cores, RAM: int64(s.RAM), Shared: s.SharedCPU,
				Prices: map[string]typePrice{},
			})
			i = len(types) - 1
		}
		types[i].Locations = append(types[i].Locations, locs...)
		for _, l := range locs {
			types[i].Prices[l] = typePrice{Hourly: s.Hourly, Monthly: s.Monthly, PerTB: s.Egress.Price, Included: int64(s.Egress.Included)}
		}
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("provider catalogue: hcloud has no shapes")
	}
	return types, nil
}

func locationNamed(name string) (location, bool) {
	i := slices.IndexFunc(knownLocations, func(l location) bool { return l.Name == name })
	if i < 0 {
		return location{}, false
	}
	return knownLocations[i], true
}

func price(v float64) string { return strconv.FormatFloat(v, 'f', 10, 64) }

func (t serverType) json() map[string]any {
	locs := []any{}
	prices := []any{}
	for _, l := range knownLocations {
		if !slices.Contains(t.Locations, l.Name) {
			continue
		}
		p := t.Prices[l.Name]
		locs = append(locs, map[string]any{"id": l.ID, "name": l.Name, "deprecation": nil})
		prices = append(prices, map[string]any{
			"location":             l.Name,
			"price_hourly":         map[string]any{"net": price(p.Hourly), "gross": price(p.Hourly)},
			"price_monthly":        map[string]any{"net": price(p.Monthly), "gross": price(p.Monthly)},
			"included_traffic":     p.Included,
			"price_per_tb_traffic": map[string]any{"net": price(p.PerTB), "gross": price(p.PerTB)},
		})
	}
	cpu := "dedicated"
	if t.Shared {
		cpu = "shared"
	}
	return map[string]any{
		"id": t.ID, "name": t.Name, "description": strings.ToUpper(t.Name), "category": "regular_purpose",
		"cores": t.Cores, "memory": float64(t.RAM) / (1 << 30), "disk": 40, "deprecated": false, "deprecation": nil,
		"prices": prices, "storage_type": "local", "cpu_type": cpu, "architecture": "x86", "locations": locs,
	}
}

func (l location) json() map[string]any {
	return map[string]any{
		"id": l.ID, "name": l.Name, "description": l.Description, "country": l.Country, "city": l.City,
		"latitude": l.Lat, "longitude": l.Long, "network_zone": l.NetworkZone,
	}
}

func (l location) datacenter(types []serverType) map[string]any {
	ids := []int64{}
	for _, t := range types {
		if slices.Contains(t.Locations, l.Name) {
			ids = append(ids, t.ID)
		}
	}
	return map[string]any{
		"id": l.DatacenterID, "name": l.DatacenterName, "description": l.DatacenterDescrip, "location": l.json(),
		"server_types": map[string]any{"supported": ids, "available": ids, "available_for_migration": ids},
	}
}

func (i image) json() map[string]any {
	return map[string]any{
		"id": i.ID, "type": "system", "status": "available", "name": i.Name, "description": i.Description,
		"image_size": nil, "disk_size": i.DiskSize, "created": i.Created, "created_from": nil, "bound_to": nil,
		"os_flavor": i.OSFlavor, "os_version": i.OSVersion, "rapid_deploy": true, "protection": map[string]any{"delete": false},
		"deprecated": nil, "deleted": nil, "labels": map[string]string{}, "architecture": "x86",
	}
}
