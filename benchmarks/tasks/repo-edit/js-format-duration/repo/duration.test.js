'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { formatDuration } = require('./duration');

test('minutes and seconds', () => {
  assert.strictEqual(formatDuration(125), '2m 5s');
});
