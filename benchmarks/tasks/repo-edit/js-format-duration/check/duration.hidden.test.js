'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { formatDuration } = require('./duration');

test('hours, minutes and seconds', () => {
  assert.strictEqual(formatDuration(3725), '1h 2m 5s');
  assert.strictEqual(formatDuration(7200), '2h');
  assert.strictEqual(formatDuration(3605), '1h 5s');
});

test('zero parts are left out', () => {
  assert.strictEqual(formatDuration(120), '2m');
  assert.strictEqual(formatDuration(59), '59s');
  assert.strictEqual(formatDuration(0), '0s');
});

test('bad input throws RangeError', () => {
  assert.throws(() => formatDuration(-1), RangeError);
  assert.throws(() => formatDuration(1.5), RangeError);
});
