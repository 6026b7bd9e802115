// Package interop holds the interoperability test between the relay and the
// real @moq/lite 0.2.2 client on Node 20 (publisher.mjs, subscriber.mjs;
// goaway.mjs records what a subscriber sees of the relay's going-away).
// It runs only with the build tag "interop", after `npm ci` in this
// directory:
//
//	cd relay/interop && npm ci && cd ../.. && go test -tags interop ./relay/interop/
package interop
