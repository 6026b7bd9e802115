package digitalocean

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/digitalocean/godo"
	"golang.org/x/oauth2"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// DefaultImage is the image of a Spec without one.
const DefaultImage = "debian-12-x64"

// Config configures a Backend; only Token is required.
type Config struct {
	Token    string       // API token; sent only in the Authorization header
	Endpoint string       // API base URL; "" means https://api.digitalocean.com/
	HTTP     *http.Client // nil means a plain client; backend.Retry wraps its transport
	Retry    backend.Retry
	// PollInterval is how often actions and droplet status are polled;
	// default 2s.
	PollInterval time.Duration
}

// Backend is the DigitalOcean box backend.
type Backend struct {
	c     *godo.Client
	retry backend.Retry
	poll  time.Duration
}

var (
	_ backend.Backend    = (*Backend)(nil)
	_ backend.Firewaller = (*Backend)(nil)
	_ backend.Labeler    = (*Backend)(nil)
)

// New returns a Backend. It makes no API call.
func New(cfg Config) (*Backend, error) {
	token := strings.TrimSpace(cfg.Token)
	if token == "" {
		return nil, errors.New("digitalocean: no API token")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	hc := &http.Client{}
	if cfg.HTTP != nil {
		c := *cfg.HTTP
		hc = &c
	}
	// oauth2 sets the Authorization header, then the retry transport
	// sends and resends; errorIDTransport keeps the API's error id.
	hc.Transport = &oauth2.Transport{
		Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}),
		Base:   cfg.Retry.Transport(errorIDTransport{hc.Transport}),
	}
	var opts []godo.ClientOpt
	if cfg.Endpoint != "" {
		ep := cfg.Endpoint
		if !strings.HasSuffix(ep, "/") {
			ep += "/" // godo resolves "v2/droplets" against it
		}
		opts = append(opts, godo.SetBaseURL(ep))
	}
	opts = append(opts, godo.SetUserAgent("relayfleet"))
	c, err := godo.New(hc, opts...)
	if err != nil {
		return nil, fmt.Errorf("digitalocean: %w", err)
	}
	return &Backend{c: c, retry: cfg.Retry, poll: cfg.PollInterval}, nil
}

// errorIDHeader carries the API's error id ("unprocessable_entity") from
// an error body to apiError; godo's ErrorResponse keeps only the message.
const errorIDHeader = "X-Relayfleet-Error-Id"

type errorIDTransport struct{ base http.RoundTripper }

func (t errorIDTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	var e struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &e) == nil && e.ID != "" {
		resp.Header.Set(errorIDHeader, e.ID)
	}
	return resp, nil
}

// Error is an error the API returned, as one line. It matches
// backend.ErrCapacity (errors.Is) when it is a capacity refusal (see
// capacityRefusal).
type Error struct {
	Status   int    // HTTP status
	ID       string // the API's error id, e.g. "unprocessable_entity"
	msg      string
	err      error
	capacity bool
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.err }

// Is reports whether e is a capacity refusal when target is
// backend.ErrCapacity.
func (e *Error) Is(target error) bool { return target == backend.ErrCapacity && e.capacity }

// capacityRefusal reports whether an error answer says that what was asked
// for is not to be had where it was asked for. DigitalOcean has no error id
// of its own for it: a droplet create is refused 422 unprocessable_entity
// with "Size is not available in this region." or "Region is not
// available", while what is wrong in the request reads "You specified an
// invalid ...".
func capacityRefusal(status int, message string) bool {
	return status == http.StatusUnprocessableEntity && strings.Contains(strings.ToLower(message), "is not available")
}

// apiError turns a godo error into one line: the HTTP status, the API's
// error id and message, and the request id.
func apiError(err error) error {
	var er *godo.ErrorResponse
	if !errors.As(err, &er) || er.Response == nil {
		return err
	}
	status := er.Response.StatusCode
	id := er.Response.Header.Get(errorIDHeader)
	msg := fmt.Sprintf("%d %s: %s", status, cmp.Or(id, strings.ToLower(http.StatusText(status))), text.Squash(cmp.Or(er.Message, "no message")))
	if er.RequestID != "" {
		msg += fmt.Sprintf(" (request %s)", er.RequestID)
	}
	return &Error{Status: status, ID: id, msg: msg, err: err, capacity: capacityRefusal(status, er.Message)}
}

func isNotFound(err error) bool {
	var er *godo.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound
}

// Tag is a label as a DigitalOcean tag, "key:value".
func Tag(key, value string) string { return key + ":" + value }

// Tags are labels as tags, sorted: one "key:value" tag per label, then
// the labels' SetTag, which names the droplets of exactly these labels.
func Tags(labels map[string]string) []string {
	tags := make([]string, 0, len(labels)+1)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		tags = append(tags, Tag(k, labels[k]))
	}
	if len(labels) > 0 {
		tags = append(tags, SetTag(labels))
	}
	return tags
}

// SetTagPrefix begins every SetTag.
const SetTagPrefix = "relayfleet:"

// maxTag is the longest tag DigitalOcean takes.
const maxTag = 255

// SetTag is the one tag that stands for the whole label set: "relayfleet:"
// then each key and value in key order, joined by colons, e.g.
// "relayfleet:event:none:fleet:demo:group:fsn:tier:steady". Labels hold
// no colon (backend.ValidLabels), so the tag is one label set's only.
// A DigitalOcean firewall applies to the droplets carrying ANY of its
// tags: a firewall meant for the droplets of several labels is applied to
// this one tag, which every droplet of those labels carries (Create,
// SetLabels) and no other droplet does.
func SetTag(labels map[string]string) string {
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(SetTagPrefix, ":"))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(":" + k + ":" + labels[k])
	}
	return b.String()
}

// checkTags refuses labels whose tags DigitalOcean would not take.
func checkTags(labels map[string]string) error {
	if err := backend.ValidLabels(labels); err != nil {
		return err
	}
	if t := SetTag(labels); len(t) > maxTag {
		return fmt.Errorf("labels %v: their set tag is %d characters, DigitalOcean takes at most %d", labels, len(t), maxTag)
	}
	return nil
}

// Labels are the "key:value" tags as labels; other tags (plain ones, and
// the set tag, which has more than one colon) are left out.
func Labels(tags []string) map[string]string {
	labels := map[string]string{}
	for _, t := range tags {
		if k, v, ok := strings.Cut(t, ":"); ok && k != "" && !strings.Contains(v, ":") {
			labels[k] = v
		}
	}
	return labels
}

// Create makes the droplet and returns it once its create action has
// completed and it is active. A droplet called spec.Name with spec's fleet
// tag is returned as it is (the one with the lowest id, should there be
// more) when its tier and event tags match spec's too, and refused when
// they do not; droplets of that name in other fleets are not looked at
// (DigitalOcean names are not unique: they are other droplets).
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Box, error) {
	fail := func(err error) (backend.Box, error) {
		return backend.Box{}, fmt.Errorf("digitalocean create droplet %s: %w", spec.Name, err)
	}
	if err := backend.CheckSpec(spec); err != nil {
		return fail(err)
	}
	if err := checkTags(spec.Labels); err != nil {
		return fail(err)
	}
	userData, err := backend.CloudInit(spec)
	if err != nil {
		return fail(err)
	}
	req := &godo.DropletCreateRequest{
		Name:     spec.Name,
		Region:   spec.Location,
		Size:     spec.Shape,
		Image:    godo.DropletCreateImage{Slug: cmp.Or(spec.Image, DefaultImage)},
		IPv6:     true,
		UserData: string(userData),
		Tags:     Tags(spec.Labels),
	}
	for try := 0; ; try++ {
		d, err := b.existing(ctx, spec)
		if err != nil {
			return fail(err)
		}
		if d != nil {
			// A droplet made before set tags lacks its own: the
			// firewall of its labels would leave it open.
			if set := SetTag(spec.Labels); !slices.Contains(d.Tags, set) {
				if err := b.tag(ctx, d.ID, set); err != nil {
					return fail(err)
				}
				d.Tags = append(d.Tags, set)
			}
			return b.waitActive(ctx, d)
		}
		d, resp, err := b.c.Droplets.Create(ctx, req)
		if err == nil {
			if resp != nil && resp.Links != nil {
				for _, a := range resp.Links.Actions {
					if a.Rel == "create" {
						if err := b.waitAction(ctx, a.ID); err != nil {
							return fail(err)
						}
					}
				}
			}
			return b.waitActive(ctx, d)
		}
		// A POST that failed with a 5xx or on the network may have made
		// the droplet: look again before posting again.
		if !postMayRetry(resp, err) || try+1 >= b.retry.MaxAttempts() || ctx.Err() != nil {
			return fail(apiError(err))
		}
		if err := ctxtime.Sleep(ctx, b.retry.Backoff(try)); err != nil {
			return fail(err)
		}
	}
}

func postMayRetry(resp *godo.Response, err error) bool {
	if resp != nil && resp.Response != nil {
		return backend.RetryStatus(resp.StatusCode)
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Named implements backend.Namer: the droplets listed by name (one page
// unless the name is shared by more than 200).
func (b *Backend) Named(ctx context.Context, name, fleet string) (backend.Box, bool, error) {
	d, err := b.named(ctx, name, fleet)
	if err != nil || d == nil {
		return backend.Box{}, false, err
	}
	return toBox(d), true, nil
}

// named is the droplet called name with the fleet's tag (the oldest when
// several), or nil.
func (b *Backend) named(ctx context.Context, name, fleet string) (*godo.Droplet, error) {
	tag := Tag(backend.LabelFleet, fleet)
	var found *godo.Droplet
	err := b.pages(func(lo *godo.ListOptions) ([]godo.Droplet, *godo.Response, error) {
		return b.c.Droplets.ListByName(ctx, name, lo)
	}, func(d godo.Droplet) {
		if d.Name == name && slices.Contains(d.Tags, tag) && (found == nil || d.ID < found.ID) {
			found = &d
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list droplets named %s: %w", name, apiError(err))
	}
	return found, nil
}

// existing is the droplet called spec.Name with spec's fleet tag, or nil;
// one whose tier or event tag differs from spec's is an error
// (backend.CheckAdopt): it is another box of the fleet, never adopted.
func (b *Backend) existing(ctx context.Context, spec backend.Spec) (*godo.Droplet, error) {
	found, err := b.named(ctx, spec.Name, spec.Labels[backend.LabelFleet])
	if err != nil {
		return nil, err
	}
	if found != nil {
		if err := backend.CheckAdopt("droplet", found.Name, fmt.Sprint(found.ID), Labels(found.Tags), spec.Labels); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// pages calls list page by page and each for every droplet.
func (b *Backend) pages(list func(*godo.ListOptions) ([]godo.Droplet, *godo.Response, error), each func(godo.Droplet)) error {
	lo := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		ds, resp, err := list(lo)
		if err != nil {
			return err
		}
		for _, d := range ds {
			each(d)
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(ds) == 0 {
			return nil
		}
		page, err := resp.Links.CurrentPage()
		if err != nil {
			return fmt.Errorf("page links: %w", err)
		}
		if page+1 <= lo.Page {
			return fmt.Errorf("page %d links to page %d as next; pagination does not advance", lo.Page, page+1)
		}
		lo.Page = page + 1
	}
}

// waitAction polls the action until it has completed.
func (b *Backend) waitAction(ctx context.Context, id int) error {
	for {
		a, _, err := b.c.Actions.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("action %d: %w", id, apiError(err))
		}
		switch a.Status {
		case godo.ActionCompleted:
			return nil
		case "errored":
			return fmt.Errorf("action %d (%s of %s %d) errored", id, a.Type, a.ResourceType, a.ResourceID)
		}
		if err := ctxtime.Sleep(ctx, b.poll); err != nil {
			return fmt.Errorf("action %d: waiting for it to complete (now %s): %w", id, a.Status, err)
		}
	}
}

// waitActive polls the droplet until it is active.
func (b *Backend) waitActive(ctx context.Context, d *godo.Droplet) (backend.Box, error) {
	for {
		switch d.Status {
		case "active":
			return toBox(d), nil
		case "off", "archive":
			return backend.Box{}, fmt.Errorf("digitalocean droplet %s (%d): %s; power it on or delete it", d.Name, d.ID, d.Status)
		}
		if err := ctxtime.Sleep(ctx, b.poll); err != nil {
			return backend.Box{}, fmt.Errorf("digitalocean droplet %s (%d): waiting for active (now %s): %w", d.Name, d.ID, d.Status, err)
		}
		next, _, err := b.c.Droplets.Get(ctx, d.ID)
		if isNotFound(err) {
			return backend.Box{}, fmt.Errorf("digitalocean droplet %s (%d): %w while waiting for it to be active", d.Name, d.ID, backend.ErrNotFound)
		}
		if err != nil {
			return backend.Box{}, fmt.Errorf("digitalocean get droplet %d: %w", d.ID, apiError(err))
		}
		d = next
	}
}

func parseID(id string) (int, error) {
	n, err := strconv.Atoi(id)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("droplet id %q: want a positive integer", id)
	}
	return n, nil
}

// Get returns the droplet with the id, or an error wrapping
// backend.ErrNotFound.
func (b *Backend) Get(ctx context.Context, id string) (backend.Box, error) {
	n, err := parseID(id)
	if err != nil {
		return backend.Box{}, fmt.Errorf("digitalocean get droplet: %w", err)
	}
	d, _, err := b.c.Droplets.Get(ctx, n)
	if isNotFound(err) {
		return backend.Box{}, fmt.Errorf("digitalocean get droplet %d: %w", n, backend.ErrNotFound)
	}
	if err != nil {
		return backend.Box{}, fmt.Errorf("digitalocean get droplet %d: %w", n, apiError(err))
	}
	return toBox(d), nil
}

// List returns the droplets carrying every label given (all droplets for
// none), sorted by name. DigitalOcean lists by one tag: the fleet's when
// labels has one, else the first key's; the other labels are checked here.
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]backend.Box, error) {
	if err := backend.ValidLabels(labels); err != nil {
		return nil, fmt.Errorf("digitalocean list droplets: %w", err)
	}
	var boxes []backend.Box
	each := func(d godo.Droplet) {
		if box := toBox(&d); backend.MatchLabels(box.Labels, labels) {
			boxes = append(boxes, box)
		}
	}
	var err error
	tag := ""
	if len(labels) == 0 {
		err = b.pages(func(lo *godo.ListOptions) ([]godo.Droplet, *godo.Response, error) { return b.c.Droplets.List(ctx, lo) }, each)
	} else {
		key := backend.LabelFleet
		if _, ok := labels[key]; !ok {
			key = slices.Sorted(maps.Keys(labels))[0]
		}
		tag = Tag(key, labels[key])
		err = b.pages(func(lo *godo.ListOptions) ([]godo.Droplet, *godo.Response, error) {
			return b.c.Droplets.ListByTag(ctx, tag, lo)
		}, each)
	}
	if err != nil {
		return nil, fmt.Errorf("digitalocean list droplets %s: %w", cmp.Or(tag, "(all)"), apiError(err))
	}
	slices.SortFunc(boxes, func(a, b backend.Box) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	return boxes, nil
}

// Delete deletes the droplet and returns once the API no longer shows it;
// a droplet that is gone already is not an error.
func (b *Backend) Delete(ctx context.Context, id string) error {
	n, err := parseID(id)
	if err != nil {
		return fmt.Errorf("digitalocean delete droplet: %w", err)
	}
	_, err = b.c.Droplets.Delete(ctx, n)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("digitalocean delete droplet %d: %w", n, apiError(err))
	}
	for {
		_, _, err := b.c.Droplets.Get(ctx, n)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("digitalocean delete droplet %d: waiting for it to go: %w", n, apiError(err))
		}
		if err := ctxtime.Sleep(ctx, b.poll); err != nil {
			return fmt.Errorf("digitalocean delete droplet %d: waiting for it to go: %w", n, err)
		}
	}
}

// SetLabels makes labels the droplet's "key:value" tags: tags for the
// labels it lacks are made if need be and put on it, "key:value" tags
// labels does not name are taken off, and its other tags are left alone.
func (b *Backend) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	n, err := parseID(id)
	if err != nil {
		return fmt.Errorf("digitalocean tag droplet: %w", err)
	}
	fail := func(err error) error { return fmt.Errorf("digitalocean tag droplet %d: %w", n, err) }
	if err := checkTags(labels); err != nil {
		return fail(err)
	}
	d, _, err := b.c.Droplets.Get(ctx, n)
	if isNotFound(err) {
		return fail(backend.ErrNotFound)
	}
	if err != nil {
		return fail(apiError(err))
	}
	want := Tags(labels)
	res := []godo.Resource{{ID: strconv.Itoa(n), Type: godo.DropletResourceType}}
	for _, tag := range want {
		if slices.Contains(d.Tags, tag) {
			continue
		}
		if err := b.tag(ctx, n, tag); err != nil {
			return fail(err)
		}
	}
	for _, tag := range d.Tags {
		if _, _, label := strings.Cut(tag, ":"); !label || slices.Contains(want, tag) {
			continue
		}
		if _, err := b.c.Tags.UntagResources(ctx, tag, &godo.UntagResourcesRequest{Resources: res}); err != nil && !isNotFound(err) {
			return fail(fmt.Errorf("untag %s: %w", tag, apiError(err)))
		}
	}
	return nil
}

// tag puts the tag on droplet id, making the tag first if need be.
func (b *Backend) tag(ctx context.Context, id int, tag string) error {
	if err := b.ensureTag(ctx, tag); err != nil {
		return err
	}
	res := []godo.Resource{{ID: strconv.Itoa(id), Type: godo.DropletResourceType}}
	if _, err := b.c.Tags.TagResources(ctx, tag, &godo.TagResourcesRequest{Resources: res}); err != nil {
		return fmt.Errorf("tag %s: %w", tag, apiError(err))
	}
	return nil
}

// ensureTag makes the tag unless it exists.
func (b *Backend) ensureTag(ctx context.Context, tag string) error {
	if _, _, err := b.c.Tags.Get(ctx, tag); isNotFound(err) {
		if _, _, err := b.c.Tags.Create(ctx, &godo.TagCreateRequest{Name: tag}); err != nil {
			return fmt.Errorf("create tag %s: %w", tag, apiError(err))
		}
	} else if err != nil {
		return fmt.Errorf("get tag %s: %w", tag, apiError(err))
	}
	return nil
}

// statuses maps droplet statuses to the backend's words.
var statuses = map[string]string{"new": backend.StatusStarting, "active": backend.StatusRunning, "off": backend.StatusOff}

func toBox(d *godo.Droplet) backend.Box {
	box := backend.Box{
		ID:     strconv.Itoa(d.ID),
		Name:   d.Name,
		Labels: Labels(d.Tags),
		Status: cmp.Or(statuses[d.Status], d.Status),
		Shape:  d.SizeSlug,
	}
	if box.Shape == "" && d.Size != nil {
		box.Shape = d.Size.Slug
	}
	if d.Region != nil {
		box.Location = d.Region.Slug
	}
	if d.Networks != nil {
		for _, n := range d.Networks.V4 {
			if a, err := netip.ParseAddr(n.IPAddress); err == nil && n.Type == "public" && !box.IPv4.IsValid() {
				box.IPv4 = a
			}
		}
		for _, n := range d.Networks.V6 {
			if a, err := netip.ParseAddr(n.IPAddress); err == nil && n.Type == "public" && !box.IPv6.IsValid() {
				box.IPv6 = a
			}
		}
	}
	return box
}
